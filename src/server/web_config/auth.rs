//! HTTP basic authentication against the bcrypt hashes of the web
//! configuration's `basic_auth_users`, as exporter-toolkit does it:
//!
//! * every path is protected (health endpoints too), with `401` and
//!   `WWW-Authenticate: Basic` for missing or wrong credentials;
//! * an unknown user is checked against a fixed hash anyway, so that timing
//!   does not reveal which users exist;
//! * bcrypt runs on the blocking pool, one check at a time, so that a flood
//!   of wrong passwords costs at most one core and never stalls the async
//!   workers;
//! * results, successes and failures alike, are cached: a scraper sending the
//!   same credentials every 15 s costs one bcrypt check in total. The cache
//!   is keyed by a salted SHA-256 digest of user, hash and password (never the
//!   password itself; the salt is random per process, so the keys cannot be
//!   precomputed), holds at most [`CACHE_CAPACITY`] entries, and is
//!   consulted again after waiting for the bcrypt slot, so concurrent
//!   requests with the same credentials cost one check.

use crate::server::telemetry::operational::RequestRejected;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::Semaphore;

use crate::server::telemetry::web_metrics::WebMetrics;
use crate::server::web_config::WebSettings;

/// Cached check results at most (the toolkit keeps 100).
pub(crate) const CACHE_CAPACITY: usize = 1024;

/// bcrypt hash (cost 10, made by Go) of a password nobody uses, checked for
/// unknown users so that they take as long as known ones (the toolkit's).
const DUMMY_HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

/// Checks credentials, with a cache.
#[derive(Debug)]
pub(crate) struct BasicAuth {
    salt: [u8; 32],
    cache: Mutex<HashMap<[u8; 32], bool>>,
    bcrypt_slot: Semaphore,
    metrics: WebMetrics,
}

impl BasicAuth {
    /// A checker with an empty cache, counting its bcrypt checks in `metrics`.
    pub(crate) fn new(metrics: WebMetrics) -> Self {
        let mut salt = [0u8; 32];
        if rustls::crypto::ring::default_provider()
            .secure_random
            .fill(&mut salt)
            .is_err()
        {
            // Without randomness the digests are still one-way; only
            // precomputation becomes possible.
            tracing::warn!("No system randomness for the password cache salt.");
        }
        Self {
            salt,
            cache: Mutex::new(HashMap::new()),
            bcrypt_slot: Semaphore::new(1),
            metrics,
        }
    }
}

/// The user and password of an `Authorization: Basic` header (Go's
/// `Request.BasicAuth`).
fn credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

impl BasicAuth {
    fn key(&self, user: &str, hash: &str, password: &str) -> [u8; 32] {
        let mut digest = Sha256::new();
        digest.update(self.salt);
        for part in [user, hash, password] {
            digest.update((part.len() as u64).to_le_bytes());
            digest.update(part.as_bytes());
        }
        digest.finalize().into()
    }

    fn cached(&self, key: &[u8; 32]) -> Option<bool> {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    fn remember(&self, key: [u8; 32], ok: bool) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_CAPACITY {
            // Drop about a tenth; the map's iteration order is randomised
            // per process, so this is random eviction, as in the toolkit.
            let drop: Vec<[u8; 32]> = cache.keys().take(CACHE_CAPACITY / 10).copied().collect();
            for k in drop {
                cache.remove(&k);
            }
        }
        cache.insert(key, ok);
    }

    /// Whether the request's credentials match one of `users`.
    pub(crate) async fn check(&self, users: &HashMap<String, String>, headers: &HeaderMap) -> bool {
        let Some((user, password)) = credentials(headers) else {
            return false;
        };
        let (hash, known) = match users.get(&user) {
            Some(hash) => (hash.as_str(), true),
            None => (DUMMY_HASH, false),
        };
        let key = self.key(&user, hash, &password);
        if let Some(ok) = self.cached(&key) {
            return ok && known;
        }
        // One bcrypt at a time; look again once it is our turn, since a
        // request with the same credentials may have filled the cache.
        let Ok(_slot) = self.bcrypt_slot.acquire().await else {
            return false;
        };
        if let Some(ok) = self.cached(&key) {
            return ok && known;
        }
        let hash = hash.to_owned();
        self.metrics.bcrypt_checked();
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false)
            && known;
        self.remember(key, ok);
        ok
    }
}

/// The `401` answer.
pub(crate) fn unauthorized() -> Response {
    let mut response = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
    response
}

/// State of [`apply_web_config`].
#[derive(Debug)]
pub(crate) struct WebLayer {
    /// The web configuration in force.
    pub(crate) web: Arc<WebSettings>,
    /// The credential checker and its cache.
    pub(crate) auth: BasicAuth,
}

/// Middleware: basic authentication (when users are configured) and the
/// configured response headers, on every path.
pub(crate) async fn apply_web_config(
    State(layer): State<Arc<WebLayer>>,
    request: Request,
    next: Next,
) -> Response {
    let config = layer.web.current();
    let mut response =
        if config.users.is_empty() || layer.auth.check(&config.users, request.headers()).await {
            next.run(request).await
        } else {
            RequestRejected::Unauthorized {
                path: request.uri().path(),
            }
            .emit(layer.web.metrics());
            unauthorized()
        };
    for (name, value) in &config.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {encoded}")).unwrap(),
        );
        headers
    }

    #[tokio::test]
    async fn checks_hashes_made_elsewhere_and_caches_results() {
        // The toolkit's hash of "fakepassword", made by Go's bcrypt.
        let users = HashMap::from([("alice".to_owned(), DUMMY_HASH.to_owned())]);
        let auth = BasicAuth::new(WebMetrics::default());
        assert!(auth.check(&users, &basic("alice", "fakepassword")).await);
        assert!(!auth.check(&users, &basic("alice", "fakepassword2")).await);
        // An unknown user with the dummy hash's password still fails.
        assert!(!auth.check(&users, &basic("mallory", "fakepassword")).await);
        assert!(!auth.check(&users, &HeaderMap::new()).await);
        assert_eq!(auth.cache.lock().unwrap().len(), 3);
        // Cached: the same answers again.
        assert!(auth.check(&users, &basic("alice", "fakepassword")).await);
        assert!(!auth.check(&users, &basic("mallory", "fakepassword")).await);
        assert_eq!(auth.cache.lock().unwrap().len(), 3);
    }

    #[test]
    fn cache_is_bounded() {
        let auth = BasicAuth::new(WebMetrics::default());
        for i in 0..CACHE_CAPACITY * 3 {
            auth.remember(auth.key("u", "h", &i.to_string()), false);
        }
        assert!(auth.cache.lock().unwrap().len() <= CACHE_CAPACITY);
    }

    #[test]
    fn parses_basic_credentials_like_go() {
        assert_eq!(
            credentials(&basic("a", "b:c")),
            Some(("a".into(), "b:c".into()))
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("basic YTpi"),
        );
        assert_eq!(credentials(&headers), Some(("a".into(), "b".into())));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer YTpi"),
        );
        assert_eq!(credentials(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic !!"));
        assert_eq!(credentials(&headers), None);
    }
}
