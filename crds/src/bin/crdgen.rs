//! Writes the StreamJob CRD to `crds/streamjob.yaml` (or stdout with `-`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let yaml = match sluice_crds::crd_yaml() {
        Ok(y) => y,
        Err(e) => {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let target =
        std::env::args().nth(1).unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/streamjob.yaml").to_owned());
    if target == "-" {
        print!("{yaml}");
        return ExitCode::SUCCESS;
    }
    match std::fs::write(&target, yaml) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crdgen: cannot write {target}: {e}");
            ExitCode::FAILURE
        }
    }
}
