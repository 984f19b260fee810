use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sluice_crds::StreamJob;

use super::meta::child_meta;
use crate::names;

/// Headless service: stable pod DNS for the StatefulSet and a target for
/// scraping every worker's metrics.
pub fn headless_service(job: &StreamJob) -> Service {
    let name = job.metadata.name.clone().unwrap_or_default();
    Service {
        metadata: child_meta(job, names::service(&name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(names::selector(&name)),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: names::WORKER_HTTP_PORT,
                target_port: Some(IntOrString::String("http".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
