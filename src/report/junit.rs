//! The JUnit XML view (`--junit FILE`), for a CI system's test report: one test case per level (or
//! replay speed), one for a soak's verdict, and one per threshold; a failure's text is the words
//! the summary uses. Written with quick-junit.

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::View;
use crate::analyze::Analysis;

pub struct Junit;

fn case(name: String, verdict: &str, why: String) -> TestCase {
    let status = match verdict {
        "pass" => TestCaseStatus::success(),
        "skipped" | "running" => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(why);
            s
        }
        // Interrupted or cut short: not the server's failure, but not a pass either.
        "interrupted" | "partial" => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
            s.set_message(why);
            s
        }
        _ => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(why);
            s
        }
    };
    TestCase::new(name, status)
}

impl View for Junit {
    fn render(&self, a: &Analysis) -> anyhow::Result<Vec<u8>> {
        let mut suite = TestSuite::new(format!("witness {}", a.mode));
        if let Some(l) = &a.load {
            for r in &l.levels {
                suite.add_test_case(case(
                    format!("level {}", r.name()),
                    &r.verdict,
                    format!("{}: {}", r.verdict.to_uppercase(), r.reasons.join("; ")),
                ));
            }
            if let Some(refused) = &l.refused {
                suite.add_test_case(case(
                    "the run".into(),
                    "fail",
                    format!("REFUSED: {refused}"),
                ));
            }
        }
        if let Some(s) = &a.soak {
            let verdict = if s.verdict == "pass" { "pass" } else { "fail" };
            suite.add_test_case(case(
                "soak".into(),
                verdict,
                format!("{}: {}", s.verdict.to_uppercase(), s.reasons.join("; ")),
            ));
        }
        for j in &a.asserts {
            suite.add_test_case(case(
                format!("assert {}", j.expr),
                if j.ok { "pass" } else { "fail" },
                j.line(),
            ));
        }
        let mut report = Report::new("witness");
        report.add_test_suite(suite);
        Ok(report.to_string()?.into_bytes())
    }
}
