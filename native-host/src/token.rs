//! The session token: 128 random bits, printed at start, required on every websocket upgrade.

use std::io::Read;

/// Reads 16 bytes from the kernel's CSPRNG and renders them as 32 hex digits.
pub fn generate() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares in time independent of where the strings differ, so the token cannot be guessed
/// byte by byte from response times.
pub fn matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A token given by the user (`NATIVE_HOST_TOKEN`) must be long enough to be a secret.
pub fn validate(token: &str) -> Result<(), String> {
    if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err("a session token needs at least 16 characters from [A-Za-z0-9_-]".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let (a, b) = (generate().unwrap(), generate().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(validate(&a).is_ok());
    }

    #[test]
    fn comparison_is_exact() {
        assert!(matches("abcdef0123456789", "abcdef0123456789"));
        assert!(!matches("abcdef0123456789", "abcdef012345678"));
        assert!(!matches("abcdef0123456789", "abcdef012345678a"));
        assert!(!matches("abcdef0123456789", ""));
        assert!(validate("short").is_err());
        assert!(validate("has space in it!!").is_err());
    }
}
