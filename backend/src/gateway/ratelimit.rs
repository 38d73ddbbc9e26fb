//! Per-client rate limits on bind and pickup, with `tower_governor` (a GCRA limiter) keyed by
//! the client's address; a refusal is a 429 with an `ApiError` body.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::IntoResponse;
use governor::clock::QuantaInstant;
use governor::middleware::NoOpMiddleware;
use tower_governor::GovernorError;
use tower_governor::GovernorLayer;
use tower_governor::governor::{GovernorConfig, GovernorConfigBuilder};
use tower_governor::key_extractor::KeyExtractor;

use super::{GatewayError, Rate};

/// Who a request counts against: the peer address, or the first `X-Forwarded-For` address when
/// the proxy in front is trusted. Requests with neither (in-process tests) share one key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientKey {
    trust_forwarded_for: bool,
}

impl KeyExtractor for ClientKey {
    type Key = Option<IpAddr>;

    fn extract<T>(&self, req: &http::Request<T>) -> Result<Self::Key, GovernorError> {
        if self.trust_forwarded_for
            && let Some(ip) = req
                .headers()
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').next())
                .and_then(|v| v.trim().parse::<IpAddr>().ok())
        {
            return Ok(Some(ip));
        }
        Ok(req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip()))
    }
}

/// The layer enforcing `rate` per client.
pub(crate) fn layer(
    rate: Rate,
    trust_forwarded_for: bool,
) -> GovernorLayer<ClientKey, NoOpMiddleware<QuantaInstant>, Body> {
    let period = Duration::from_secs(60) / rate.per_minute.max(1);
    let config: GovernorConfig<ClientKey, NoOpMiddleware<QuantaInstant>> = GovernorConfigBuilder::default()
        .key_extractor(ClientKey { trust_forwarded_for })
        .period(period.max(Duration::from_nanos(1)))
        .burst_size(rate.burst.max(1))
        .finish()
        .unwrap_or_else(|| unreachable!("period and burst are positive"));
    GovernorLayer::new(Arc::new(config)).error_handler(|error| match error {
        GovernorError::TooManyRequests { wait_time, .. } => GatewayError::RateLimited(wait_time).into_response(),
        _ => GatewayError::RateLimited(1).into_response(),
    })
}
