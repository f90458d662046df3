"""mcp-server-git (PyPI) with one repository held open from its start, as a long session may hold
one: that repository's `git cat-file --batch` and `--batch-check` stay alive beside the short-lived
ones each call makes, the same command under the same parent. It serves after WAIT seconds, so
the held ones are old by the first call.

usage: git_server_held.py REPO WAIT"""
import sys
import time

import git
from mcp_server_git import main
from mcp_server_git.server import git_log

held = git.Repo(sys.argv[1])
# Reading the log starts the repository's cat-file processes; they live as long as `held` does.
git_log(held)
time.sleep(float(sys.argv[2]))
sys.argv = ["mcp-server-git"]
main()
