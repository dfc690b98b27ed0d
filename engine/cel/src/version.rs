//! Kubernetes' two CEL environments and the compatibility version that tells them apart.
//!
//! kube-apiserver compiles a *new or changed* expression with the NewExpressions environment:
//! only libraries introduced at or before its compatibility version. Expressions already
//! stored, and every expression at runtime, get the StoredExpressions environment: every
//! library the binary has. So a cluster can be rolled back one minor version without stored
//! policies failing to compile. On a 1.36 binary the compatibility version defaults to 1.35
//! and may be set between 1.33 (the binary minus three) and 1.36.

use std::fmt;
use std::str::FromStr;

/// The Kubernetes minor version celgate's CEL environment corresponds to.
pub const BINARY_MINOR: u32 = 36;

/// A Kubernetes compatibility version, `1.<minor>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Compatibility {
    minor: u32,
}

impl Compatibility {
    /// The lowest compatibility version a 1.36 API server accepts (binary minus three).
    pub const MIN: Self = Self {
        minor: BINARY_MINOR - 3,
    };
    /// The binary's own version.
    pub const MAX: Self = Self {
        minor: BINARY_MINOR,
    };
    /// kube-apiserver's default: the binary minus one.
    pub const DEFAULT: Self = Self {
        minor: BINARY_MINOR - 1,
    };

    /// `1.<minor>`, if it is within [`Self::MIN`]..=[`Self::MAX`].
    pub fn new(minor: u32) -> Result<Self, VersionError> {
        let v = Self { minor };
        if (Self::MIN..=Self::MAX).contains(&v) {
            Ok(v)
        } else {
            Err(VersionError::OutOfRange(v.to_string()))
        }
    }

    /// The minor version.
    pub const fn minor(self) -> u32 {
        self.minor
    }
}

impl Default for Compatibility {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for Compatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

impl FromStr for Compatibility {
    type Err = VersionError;

    /// Parses `1.<minor>` (a patch, as in `1.35.2`, is ignored as upstream ignores it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.trim().trim_start_matches('v').split('.');
        let major = parts.next().and_then(|p| p.parse::<u32>().ok());
        let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
        let patch_ok = parts.next().is_none_or(|p| p.parse::<u32>().is_ok());
        match (major, minor) {
            (Some(1), Some(minor)) if patch_ok && parts.next().is_none() => Self::new(minor),
            _ => Err(VersionError::Malformed(s.to_string())),
        }
    }
}

/// Which of Kubernetes' two environments to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expressions {
    /// For expressions being created or changed: libraries introduced at or before the
    /// compatibility version.
    New(Compatibility),
    /// For stored expressions and evaluation: every library.
    Stored,
}

/// A compatibility version celgate cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not of the form `1.<minor>`.
    #[error("compatibility version {0:?} is not of the form 1.<minor>, e.g. 1.35")]
    Malformed(String),
    /// Outside what a 1.36 API server accepts.
    #[error(
        "compatibility version {0} is outside the range a Kubernetes 1.36 API server accepts (1.33 to 1.36)"
    )]
    OutOfRange(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_bounds_versions() {
        assert_eq!("1.35".parse::<Compatibility>(), Ok(Compatibility::DEFAULT));
        assert_eq!(
            "v1.34.2".parse::<Compatibility>().map(|c| c.minor()),
            Ok(34)
        );
        assert_eq!(Compatibility::DEFAULT.to_string(), "1.35");
        assert!(matches!(
            "1.32".parse::<Compatibility>(),
            Err(VersionError::OutOfRange(v)) if v == "1.32"
        ));
        assert!(matches!(
            "1.37".parse::<Compatibility>(),
            Err(VersionError::OutOfRange(_))
        ));
        for bad in ["", "1", "2.35", "1.x", "1.35.x", "1.35.1.1"] {
            assert!(
                matches!(
                    bad.parse::<Compatibility>(),
                    Err(VersionError::Malformed(_))
                ),
                "{bad}"
            );
        }
    }
}
