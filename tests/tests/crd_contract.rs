//! The StreamJob CRD against the real kube-apiserver: it installs, every
//! example manifest is accepted, and bad manifests are rejected with errors
//! that name the field.

use sluice_e2e::kube::{expectations, kubectl, kubectl_ok, new_namespace, yaml_files};

#[test]
fn crd_applies_and_is_established() {
    kubectl_ok(["apply", "--server-side", "--force-conflicts", "-f", "crds/streamjob.yaml"]);
    kubectl_ok(["wait", "--for=condition=Established", "crd/streamjobs.sluice.dev", "--timeout=60s"]);
    let names = kubectl_ok(["api-resources", "--api-group=sluice.dev", "-o", "name"]);
    assert!(names.contains("streamjobs.sluice.dev"), "{names}");
    // The short name works.
    kubectl_ok(["get", "sj", "-A"]);
}

#[test]
fn every_example_is_accepted_by_the_api_server() {
    let ns = new_namespace("examples");
    let files = yaml_files("manifests/examples");
    assert!(files.len() >= 6, "quickstart and the five seed scenarios: {files:?}");
    for f in &files {
        let out = kubectl_ok(["apply", "-n", &ns, "-f", f.to_str().unwrap()]);
        assert!(out.contains("created") || out.contains("configured"), "{}: {out}", f.display());
    }
    // Stored and readable with the printer columns of the CRD.
    let table = kubectl_ok(["get", "sj", "-n", &ns]);
    for column in ["READY", "WORKERS", "PARTITIONS", "AGE"] {
        assert!(table.contains(column), "missing column {column}:\n{table}");
    }
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn invalid_manifests_are_rejected_naming_the_field() {
    let files = yaml_files("tests/fixtures/invalid");
    assert!(!files.is_empty());
    for f in &files {
        let expected = expectations(f);
        assert!(!expected.is_empty(), "{} has no `# expect:` lines", f.display());
        let r = kubectl(["apply", "--dry-run=server", "-f", f.to_str().unwrap()]);
        assert!(!r.success, "{} was accepted:\n{}", f.display(), r.stdout);
        for e in expected {
            assert!(r.stderr.contains(&e), "{}: error does not mention {e:?}:\n{}", f.display(), r.stderr);
        }
    }
}
