//! The HTTP upgrade: path, Origin and session token are checked before a websocket exists.
//!
//! Browsers always send `Origin` on websocket upgrades, so a page from another site is refused
//! here (403). Clients that are not browsers (CLI tools, tests) send none; they still need the
//! token (401), which only the person who started the bridge has.

use super::Config;
use kernels_wasm::protocol::{TOKEN_PARAM, WS_PATH};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;

/// Why an upgrade was refused; also the HTTP status and body the client sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    WrongPath(String),
    Origin(String),
    NoToken,
    BadToken,
    Full,
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::WrongPath(_) => StatusCode::NOT_FOUND,
            Refusal::Origin(_) => StatusCode::FORBIDDEN,
            Refusal::NoToken | Refusal::BadToken => StatusCode::UNAUTHORIZED,
            Refusal::Full => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn reason(&self) -> String {
        match self {
            Refusal::WrongPath(p) => format!("no websocket at {p:?}; connect to {WS_PATH}"),
            Refusal::Origin(o) => {
                format!("origin {o:?} is not allowed (start the bridge with --allow-origin {o} to permit it)")
            }
            Refusal::NoToken => format!(
                "missing session token: connect to {WS_PATH}?{TOKEN_PARAM}=<token printed by native-host serve>"
            ),
            Refusal::BadToken => "wrong session token".into(),
            Refusal::Full => format!("too many connections (limit {})", super::MAX_CONNECTIONS),
        }
    }

    pub fn response(&self) -> ErrorResponse {
        let mut resp = ErrorResponse::new(Some(self.reason()));
        *resp.status_mut() = self.status();
        resp
    }
}

/// Decides whether an upgrade request may become a websocket.
pub fn check(request: &Request, config: &Config) -> Result<(), Refusal> {
    let uri = request.uri();
    if uri.path() != WS_PATH {
        return Err(Refusal::WrongPath(uri.path().to_string()));
    }
    if let Some(origin) = request.headers().get("origin") {
        let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        if !config.allowed_origins.iter().any(|o| o.trim_end_matches('/') == origin) {
            return Err(Refusal::Origin(origin));
        }
    }
    let token = uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix(TOKEN_PARAM).and_then(|rest| rest.strip_prefix('=')))
        .ok_or(Refusal::NoToken)?;
    if !crate::token::matches(&config.token, token) {
        return Err(Refusal::BadToken);
    }
    Ok(())
}

/// The callback tungstenite runs on the upgrade request.
// The large error type is tungstenite's own HTTP response; the signature is not ours to choose.
#[allow(clippy::result_large_err)]
pub fn callback(
    config: &Config,
    has_slot: bool,
) -> impl FnOnce(&Request, Response) -> Result<Response, ErrorResponse> + '_ {
    move |request, response| {
        let verdict = check(request, config).and(if has_slot { Ok(()) } else { Err(Refusal::Full) });
        match verdict {
            Ok(()) => Ok(response),
            Err(refusal) => {
                crate::warn!("refused websocket upgrade: {}", refusal.reason());
                Err(refusal.response())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::Roots;
    use kernels_wasm::protocol::{Capabilities, ProbeResult};

    fn config() -> Config {
        let p = ProbeResult { available: false, detail: String::new() };
        Config {
            token: "0123456789abcdef0123456789abcdef".into(),
            allowed_origins: vec!["http://127.0.0.1:8080".into(), "http://app.test/".into()],
            roots: Roots::default(),
            capabilities: Capabilities { ebpf: p.clone(), clang: p },
            host_version: "t".into(),
            ebpf_run: Default::default(),
            esp32_run: Default::default(),
            qwengpu_chat: Default::default(),
            include_filter: crate::qwengpu::Filter::On,
        }
    }

    fn req(uri: &str, origin: Option<&str>) -> Request {
        let mut b = Request::builder().uri(uri);
        if let Some(o) = origin {
            b = b.header("Origin", o);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn upgrade_rules() {
        let c = config();
        let good = "/ws?token=0123456789abcdef0123456789abcdef";
        assert_eq!(check(&req(good, Some("http://127.0.0.1:8080")), &c), Ok(()));
        assert_eq!(check(&req(good, Some("http://app.test")), &c), Ok(()));
        assert_eq!(check(&req(good, None), &c), Ok(()));
        assert_eq!(check(&req(&format!("{good}&x=1"), None), &c), Ok(()));
        assert!(matches!(check(&req(good, Some("http://evil.test")), &c), Err(Refusal::Origin(_))));
        assert!(matches!(check(&req(good, Some("http://127.0.0.1:8081")), &c), Err(Refusal::Origin(_))));
        assert_eq!(check(&req("/ws", None), &c), Err(Refusal::NoToken));
        assert_eq!(check(&req("/ws?tokenx=1", None), &c), Err(Refusal::NoToken));
        assert_eq!(check(&req("/ws?token=0123456789abcdef0123456789abcdee", None), &c), Err(Refusal::BadToken));
        assert!(matches!(check(&req("/other?token=x", None), &c), Err(Refusal::WrongPath(_))));
        assert_eq!(Refusal::Origin("x".into()).status(), StatusCode::FORBIDDEN);
        assert_eq!(Refusal::NoToken.status(), StatusCode::UNAUTHORIZED);
    }
}
