//! The bridge's file sandbox. Every path a client names is relative to one of two roots (the
//! models directory, `assets/`) and must still be inside that root after symlinks are resolved.

use kernels_wasm::protocol::{ErrorCode, FileFormat, FileRoot, ModelEntry, ModelInfo};
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Listing stops here, so a huge directory cannot stall the bridge or blow up a reply frame.
pub const MAX_LISTED: usize = 2_000;
const MAX_DEPTH: usize = 6;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("no {0:?} directory is configured on this host")]
    NoRoot(FileRoot),
    #[error("path {path:?} refused: {why}")]
    Refused { path: String, why: &'static str },
    #[error("{path:?} not found under the {root:?} directory")]
    NotFound { root: FileRoot, path: String },
    #[error("{path:?}: {source}")]
    Io { path: String, source: std::io::Error },
}

impl FileError {
    pub fn code(&self) -> ErrorCode {
        match self {
            FileError::NoRoot(_) | FileError::NotFound { .. } => ErrorCode::NotFound,
            FileError::Refused { .. } => ErrorCode::PathRefused,
            FileError::Io { .. } => ErrorCode::Io,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Roots {
    models: Option<PathBuf>,
    assets: Option<PathBuf>,
}

impl Roots {
    /// Roots are canonicalised once; a root that does not exist is an error for the caller to show.
    pub fn new(models: Option<&Path>, assets: Option<&Path>) -> std::io::Result<Roots> {
        let canon = |p: Option<&Path>| p.map(|p| p.canonicalize().map_err(|e| with_path(e, p))).transpose();
        Ok(Roots { models: canon(models)?, assets: canon(assets)? })
    }

    pub fn root(&self, root: FileRoot) -> Option<&Path> {
        match root {
            FileRoot::Models => self.models.as_deref(),
            FileRoot::Assets => self.assets.as_deref(),
        }
    }

    /// Resolves `rel` under `root`, refusing anything that could name a file outside it.
    pub fn resolve(&self, root: FileRoot, rel: &str) -> Result<PathBuf, FileError> {
        let base = self.root(root).ok_or(FileError::NoRoot(root))?;
        let refuse = |why| FileError::Refused { path: rel.to_string(), why };
        if rel.is_empty() {
            return Err(refuse("empty path"));
        }
        if rel.contains('\0') || rel.contains('\\') {
            return Err(refuse("NUL or backslash in path"));
        }
        for component in Path::new(rel).components() {
            match component {
                Component::Normal(_) | Component::CurDir => {}
                Component::ParentDir => return Err(refuse("'..' is not allowed")),
                Component::RootDir | Component::Prefix(_) => return Err(refuse("absolute paths are not allowed")),
            }
        }
        let joined = base.join(rel);
        let real = joined.canonicalize().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => FileError::NotFound { root, path: rel.to_string() },
            _ => FileError::Io { path: rel.to_string(), source: e },
        })?;
        if !real.starts_with(base) {
            return Err(refuse("it resolves (through a symlink) outside the permitted directory"));
        }
        Ok(real)
    }

    pub fn info(&self, root: FileRoot, rel: &str) -> Result<ModelInfo, FileError> {
        let path = self.resolve(root, rel)?;
        let io = |source| FileError::Io { path: rel.to_string(), source };
        let meta = std::fs::metadata(&path).map_err(io)?;
        if !meta.is_file() {
            return Err(FileError::Refused { path: rel.to_string(), why: "not a regular file" });
        }
        let mut head = Vec::with_capacity(16);
        std::fs::File::open(&path).map_err(io)?.take(16).read_to_end(&mut head).map_err(io)?;
        Ok(ModelInfo { root, path: rel.to_string(), bytes: meta.len(), format: FileFormat::sniff(&head) })
    }

    /// Regular files under both roots, sorted, at most [`MAX_LISTED`]. Symlinks leading outside
    /// a root are skipped, like any path that [`Roots::resolve`] would refuse.
    pub fn list(&self) -> Vec<ModelEntry> {
        let mut out = Vec::new();
        for root in [FileRoot::Models, FileRoot::Assets] {
            if let Some(base) = self.root(root) {
                walk(base, base, root, 0, &mut out);
            }
        }
        out.sort_by(|a, b| (a.root as u8, &a.path).cmp(&(b.root as u8, &b.path)));
        out
    }
}

fn walk(base: &Path, dir: &Path, root: FileRoot, depth: usize, out: &mut Vec<ModelEntry>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if out.len() >= MAX_LISTED {
            return;
        }
        let Ok(real) = entry.path().canonicalize() else { continue };
        if !real.starts_with(base) {
            continue;
        }
        match std::fs::metadata(&real) {
            Ok(m) if m.is_dir() && depth < MAX_DEPTH => walk(base, &entry.path(), root, depth + 1, out),
            Ok(m) if m.is_file() => {
                if let Ok(rel) = entry.path().strip_prefix(base) {
                    let path = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
                    out.push(ModelEntry { root, path, bytes: m.len() });
                }
            }
            _ => {}
        }
    }
}

/// The host's own cache directory `$TMPDIR/substrates-NAME-EUID` (the bridge's dummy models): made
/// 0700 if missing, and used only if it is a real directory (not a link) owned by this user with no
/// access for others, so nobody else can have planted or swapped a file in it.
pub fn private_dir(name: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let dir = std::env::temp_dir().join(format!("substrates-{name}-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(with_path(e, &dir)),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| with_path(e, &dir))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        let why = format!(
            "{} is not a private directory of uid {uid} (a link, another owner, or open to others); remove it",
            dir.display()
        );
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, why));
    }
    Ok(dir)
}

fn with_path(e: std::io::Error, p: &Path) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("substrates-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("models/sub")).unwrap();
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(dir.join("models/m.gguf"), b"GGUF\x03\0\0\0\0\0\0\0\0\0\0\0tail").unwrap();
        std::fs::write(dir.join("models/sub/x.bin"), b"xyz").unwrap();
        std::fs::write(dir.join("secret.txt"), b"do not read").unwrap();
        std::os::unix::fs::symlink(dir.join("secret.txt"), dir.join("models/escape")).unwrap();
        std::os::unix::fs::symlink(dir.join("models/m.gguf"), dir.join("models/alias.gguf")).unwrap();
        Scratch(dir)
    }

    fn roots(s: &Scratch) -> Roots {
        Roots::new(Some(&s.0.join("models")), Some(&s.0.join("assets"))).unwrap()
    }

    #[test]
    fn files_inside_are_read() {
        let s = scratch("inside");
        let r = roots(&s);
        let info = r.info(FileRoot::Models, "m.gguf").unwrap();
        assert_eq!((info.bytes, info.format), (20, FileFormat::Gguf { version: 3 }));
        assert_eq!(r.info(FileRoot::Models, "./sub/x.bin").unwrap().bytes, 3);
        // A symlink that stays inside is fine.
        assert_eq!(r.info(FileRoot::Models, "alias.gguf").unwrap().bytes, 20);
    }

    #[test]
    fn escapes_are_refused() {
        let s = scratch("escape");
        let r = roots(&s);
        for bad in ["../secret.txt", "sub/../../secret.txt", "/etc/passwd", "escape", "", "a\0b", "..\\secret.txt"] {
            let err = r.info(FileRoot::Models, bad).expect_err(bad);
            assert_eq!(err.code(), ErrorCode::PathRefused, "{bad:?}: {err}");
        }
        assert_eq!(r.info(FileRoot::Models, "missing.gguf").unwrap_err().code(), ErrorCode::NotFound);
        assert_eq!(r.info(FileRoot::Models, "sub").unwrap_err().code(), ErrorCode::PathRefused);
        let no_models = Roots::new(None, Some(&s.0.join("assets"))).unwrap();
        assert_eq!(no_models.info(FileRoot::Models, "m.gguf").unwrap_err().code(), ErrorCode::NotFound);
    }

    #[test]
    fn private_dirs_refuse_what_another_user_could_have_planted() {
        use std::os::unix::fs::PermissionsExt;
        let name = format!("files-private-{}", std::process::id());
        let dir = private_dir(&name).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(private_dir(&name).unwrap(), dir, "reused when it is ours");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&name).unwrap_err();
        assert!(e.to_string().contains("not a private directory"), "{e}");
        std::fs::remove_dir(&dir).unwrap();
        let s = scratch("private");
        std::os::unix::fs::symlink(&s.0, &dir).unwrap();
        assert!(private_dir(&name).is_err(), "a link is refused");
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn listing_skips_escaping_links() {
        let s = scratch("list");
        let listed: Vec<String> = roots(&s).list().into_iter().map(|e| e.path).collect();
        assert_eq!(listed, ["alias.gguf", "m.gguf", "sub/x.bin"]);
    }
}
