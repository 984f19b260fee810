//! The worker's HTTP endpoint: `/metrics` (Prometheus text format),
//! `/healthz` (the process is alive) and `/readyz` (assigned and consuming).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;
use crate::runtime::Health;

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(AppState { metrics, health })
}

async fn metrics_handler(State(s): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render())
}

async fn ready_handler(State(s): State<AppState>) -> impl IntoResponse {
    match s.health.readiness() {
        Ok(state) => {
            s.metrics.ready.set(1);
            (StatusCode::OK, state)
        }
        Err(reason) => {
            s.metrics.ready.set(0);
            (StatusCode::SERVICE_UNAVAILABLE, reason)
        }
    }
}
