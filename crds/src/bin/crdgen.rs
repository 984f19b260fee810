//! Writes the StreamJob CRD to `crds/streamjob.yaml` (or stdout with `-`).

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let yaml = match sluice_crds::crd_yaml() {
        Ok(y) => y,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let target =
        std::env::args().nth(1).unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/streamjob.yaml").to_owned());
    if target == "-" {
        // `crdgen - | head`: output with nowhere to go is not worth a panic.
        let _ = std::io::stdout().write_all(yaml.as_bytes());
        return ExitCode::SUCCESS;
    }
    match std::fs::write(&target, yaml) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "crdgen: cannot write {target}: {e}");
            ExitCode::FAILURE
        }
    }
}
