//! `/metrics`, `/healthz` and `/readyz` of the operator.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

pub fn router(metrics: Metrics) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let text = metrics.render();
                async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response() }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
}
