//! The witness binary: parse, run, map the error to an exit code.

fn main() {
    // The watchdog that ends the server tree if witness is killed (server/watchdog.rs): not a command.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "__watchdog")
    {
        std::process::exit(witness::server::watchdog::watchdog_main());
    }
    let cli = witness::cli::Cli::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let internal = cli.command.internal_error_code();
    if cli.command.starts_a_child() {
        witness::server::watchdog::fork_early();
    }
    let mut builder = if cli.command.mostly_waits() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let rt = match builder.enable_all().thread_name("witness").build() {
        Ok(rt) => rt,
        Err(e) => {
            witness::errln!("witness: could not start the async runtime: {e}");
            std::process::exit(internal);
        }
    };
    let code = match rt.block_on(witness::run(cli)) {
        Ok(code) => code,
        Err(err) => {
            // The run's secrets never reach the terminal, whatever the error quotes.
            // A reason the run already said is not said again: only the outermost words.
            let text = if err.is::<witness::error::AlreadySaid>() {
                format!("{err}")
            } else {
                format!("{err:#}")
            };
            witness::errln!("witness: error: {}", witness::secrets::scrub(&text));
            witness::error::exit_code(&err, internal)
        }
    };
    // Background drains and samplers must not hold the exit.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    std::process::exit(code);
}
