//! The view in the address bar: `#tab?key=value&key=value`, so a reload or a shared link opens
//! the same tab with the same choices. The hash, not the query: the query carries the session
//! token, which the page removes once read, and a hash change reloads nothing.

/// A tab and its choices, in the order they were set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    pub tab: String,
    pub params: Vec<(String, String)>,
}

impl Link {
    /// Reads `#tab?k=v&…` (the `#` optional). Pairs without `=` or with an empty key are
    /// dropped; the tab's own validity is for the page to judge.
    pub fn parse(hash: &str) -> Link {
        let hash = hash.strip_prefix('#').unwrap_or(hash);
        let (tab, query) = hash.split_once('?').unwrap_or((hash, ""));
        let params = query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .filter(|(k, _)| !k.is_empty())
            .map(|(k, v)| (decode(k), decode(v)))
            .collect();
        Link { tab: decode(tab), params }
    }

    /// The hash that [`Link::parse`] reads back as this link (without the `#`).
    pub fn to_hash(&self) -> String {
        let mut out = encode(&self.tab);
        for (i, (k, v)) in self.params.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(&encode(k));
            out.push('=');
            out.push_str(&encode(v));
        }
        out
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Sets `key` in place (keeping the order of the others), or appends it.
    pub fn set(&mut self, key: &str, value: &str) {
        match self.params.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value.to_string(),
            None => self.params.push((key.to_string(), value.to_string())),
        }
    }
}

/// Percent-encodes everything but letters, digits and `-._~` (RFC 3986's unreserved set), byte
/// by byte of the UTF-8, so any value survives the address bar.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Undoes [`encode`] (and `+` as a space, as forms write it); a malformed escape stays as it is
/// written, and bytes that are not UTF-8 become U+FFFD: the caller then sees a value it rejects.
fn decode(s: &str) -> String {
    let (bytes, mut out, mut i) = (s.as_bytes(), Vec::with_capacity(s.len()), 0);
    while i < bytes.len() {
        let hex = |j: usize| bytes.get(j).and_then(|&c| (c as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn a_link_reads_back_as_written_whatever_its_values() {
        let mut l = Link { tab: "bitnet".into(), params: vec![] };
        l.set("format", "TL2");
        l.set("shape", "256×512");
        l.set("prompt", "a&b=c d%");
        l.set("format", "I2_S");
        assert_eq!(l.get("format"), Some("I2_S"));
        assert_eq!(l.params[0].0, "format", "a set keeps its place");
        let hash = l.to_hash();
        assert!(hash.starts_with("bitnet?format=I2_S&shape=256%C3%97512&prompt="), "{hash}");
        assert_eq!(Link::parse(&format!("#{hash}")), l);
        assert_eq!(Link::parse(&hash), l);
    }

    #[test]
    fn malformed_hashes_give_what_can_be_read() {
        assert_eq!(Link::parse(""), Link::default());
        assert_eq!(Link::parse("#esp32"), Link { tab: "esp32".into(), params: vec![] });
        let l = Link::parse("#qwengpu?kernel&=x&k=%zz%4&k2=a+b&k3=%FF");
        assert_eq!(l.tab, "qwengpu");
        assert_eq!(l.get("k"), Some("%zz%4"));
        assert_eq!(l.get("k2"), Some("a b"));
        assert_eq!(l.get("k3"), Some("\u{FFFD}"));
        assert_eq!(l.get("kernel"), None);
        assert_eq!(l.params.len(), 3);
    }
}
