//! Running the controller(s): one per watched namespace (or one for all),
//! watching StreamJobs and the children they own.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::Controller;
use kube::runtime::watcher::Config;
use kube::{Api, Client};
use sluice_crds::StreamJob;

use crate::reconcile::{Context, error_policy, reconcile};

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs until the process is asked to stop (SIGTERM / SIGINT).
pub async fn run(ctx: Arc<Context>, namespaces: Vec<String>) {
    let scopes: Vec<Option<String>> =
        if namespaces.is_empty() { vec![None] } else { namespaces.into_iter().map(Some).collect() };
    let controllers = scopes.into_iter().map(|ns| {
        let client = ctx.client.clone();
        let ctx = Arc::clone(&ctx);
        let owned = Config::default().labels("app.kubernetes.io/managed-by=sluice-operator");
        async move {
            let ns = ns.as_deref();
            Controller::new(api::<StreamJob>(&client, ns), Config::default())
                .owns(api::<StatefulSet>(&client, ns), owned.clone())
                .owns(api::<ConfigMap>(&client, ns), owned.clone())
                .owns(api::<Service>(&client, ns), owned.clone())
                .owns(api::<PodDisruptionBudget>(&client, ns), owned)
                .shutdown_on_signal()
                .run(reconcile, error_policy, ctx)
                .for_each(|result| async move {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "reconcile stream");
                    }
                })
                .await;
        }
    });
    futures::future::join_all(controllers).await;
}
