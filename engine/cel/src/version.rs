//! Kubernetes' two CEL environments and the compatibility version that tells them apart.
//!
//! kube-apiserver compiles a *new or changed* expression with the NewExpressions environment:
//! only libraries introduced at or before its compatibility version. Expressions already
//! stored, and every expression at runtime, get the StoredExpressions environment: every
//! library the binary has. So a cluster can be rolled back one minor version without stored
//! policies failing to compile. An API server 1.N defaults it to 1.(N-1) (1.30 fixed it at
//! 1.29). celgate accepts every version a supported cluster (1.30 to 1.36) may have, 1.29 to
//! 1.36, and defaults to its cluster's ([`Compatibility::for_cluster`]).

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
    /// The lowest compatibility version celgate accepts: that of the oldest cluster it
    /// supports, 1.30, whose API server fixed it at 1.29.
    pub const MIN: Self = Self { minor: 29 };
    /// The binary's own version.
    pub const MAX: Self = Self {
        minor: BINARY_MINOR,
    };
    /// kube-apiserver 1.36's default: the binary minus one.
    pub const DEFAULT: Self = Self {
        minor: BINARY_MINOR - 1,
    };

    /// The default of an API server `1.<cluster_minor>`: the cluster minus one, within
    /// [`Self::MIN`]..=[`Self::MAX`] (a newer cluster gets celgate's newest).
    pub fn for_cluster(cluster_minor: u32) -> Self {
        Self {
            minor: cluster_minor
                .saturating_sub(1)
                .clamp(Self::MIN.minor, Self::MAX.minor),
        }
    }

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
    /// Outside what the supported clusters (1.30 to 1.36) use.
    #[error(
        "compatibility version {0} is outside the range of the Kubernetes versions celgate supports (1.29 to 1.36)"
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
        assert_eq!("1.29".parse::<Compatibility>(), Ok(Compatibility::MIN));
        assert!(matches!(
            "1.28".parse::<Compatibility>(),
            Err(VersionError::OutOfRange(v)) if v == "1.28"
        ));
        assert!(matches!(
            "1.37".parse::<Compatibility>(),
            Err(VersionError::OutOfRange(_))
        ));
        // A cluster's default: its minor minus one, within celgate's range.
        assert_eq!(Compatibility::for_cluster(30), Compatibility::MIN);
        assert_eq!(Compatibility::for_cluster(33).to_string(), "1.32");
        assert_eq!(Compatibility::for_cluster(36), Compatibility::DEFAULT);
        assert_eq!(Compatibility::for_cluster(40), Compatibility::MAX);
        assert_eq!(Compatibility::for_cluster(25), Compatibility::MIN);
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
