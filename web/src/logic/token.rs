//! The session token travels in the page URL (`?token=…`, printed by `cargo xtask serve`) and
//! then on the websocket URL. Parsing is kept here so it is tested.

/// The `token` value of a `location.search` string such as `?a=1&token=abc`.
pub fn from_query(search: &str) -> Option<String> {
    search
        .trim_start_matches('?')
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        .map(str::to_string)
}

/// The query string with the token removed, so it does not linger in the address bar.
pub fn strip(search: &str) -> String {
    let rest: Vec<&str> =
        search.trim_start_matches('?').split('&').filter(|kv| !kv.is_empty() && !kv.starts_with("token=")).collect();
    if rest.is_empty() {
        String::new()
    } else {
        format!("?{}", rest.join("&"))
    }
}

/// The bridge URL for a page at `protocol`//`host`: the same origin, path `/ws`.
pub fn ws_url(protocol: &str, host: &str, token: &str) -> String {
    let scheme = if protocol == "https:" { "wss" } else { "ws" };
    format!("{scheme}://{host}/ws?token={token}")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn tokens_are_found_and_stripped() {
        assert_eq!(from_query("?token=abc123"), Some("abc123".into()));
        assert_eq!(from_query("?x=1&token=a-b_c"), Some("a-b_c".into()));
        assert_eq!(from_query("?token="), None);
        assert_eq!(from_query("?token=<script>"), None);
        assert_eq!(from_query(""), None);
        assert_eq!(strip("?token=abc"), "");
        assert_eq!(strip("?x=1&token=abc&y=2"), "?x=1&y=2");
        assert_eq!(ws_url("http:", "127.0.0.1:8080", "t"), "ws://127.0.0.1:8080/ws?token=t");
        assert_eq!(ws_url("https:", "h", "t"), "wss://h/ws?token=t");
    }
}
