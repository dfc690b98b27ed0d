//! The Kubernetes minor of the control planes the suite starts: `CELGATE_K8S_MINOR` (`1.30`,
//! as `e2e/cluster/versions.sh list` names them; `make e2e-versions` sets it), else today's pin
//! (`e2e/cluster/versions.env`). `e2e/cluster/build.sh` reads the same variable, so
//! [`crate::Cluster::start`] runs that minor's kube-apiserver, etcd and kubectl.

use crate::workspace;

/// The variable that picks the control plane's minor.
pub const MINOR_VAR: &str = "CELGATE_K8S_MINOR";

/// The minor `1.<n>` of the control plane: `n`.
pub fn minor() -> u32 {
    let chosen = std::env::var(MINOR_VAR).ok().filter(|v| !v.is_empty());
    let text = match chosen {
        Some(v) => v,
        None => {
            let pins = workspace().join("e2e/cluster/versions.env");
            let text = std::fs::read_to_string(&pins)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", pins.display()));
            text.lines()
                .find_map(|l| l.trim().strip_prefix("K8S_VERSION="))
                .unwrap_or_else(|| panic!("{} pins no K8S_VERSION", pins.display()))
                .to_string()
        }
    };
    parse_minor(&text).unwrap_or_else(|| panic!("{MINOR_VAR}={text:?} is not 1.<minor>"))
}

/// `n` of `1.<n>` or `1.<n>.<patch>`.
fn parse_minor(text: &str) -> Option<u32> {
    let mut parts = text.trim().split('.');
    (parts.next()? == "1").then_some(())?;
    parts.next()?.parse().ok()
}

/// The apiVersion of the in-tree MutatingAdmissionPolicy on `1.<minor>`: alpha `v1alpha1` in
/// 1.32–1.33, beta `v1beta1` in 1.34–1.35 (both behind the `MutatingAdmissionPolicy` feature
/// gate), `v1` from 1.36; none before 1.32.
pub fn in_tree_map_api(minor: u32) -> Option<&'static str> {
    match minor {
        0..=31 => None,
        32 | 33 => Some("admissionregistration.k8s.io/v1alpha1"),
        34 | 35 => Some("admissionregistration.k8s.io/v1beta1"),
        _ => Some("admissionregistration.k8s.io/v1"),
    }
}

/// kube-apiserver flags that turn on the in-tree MutatingAdmissionPolicy of `1.<minor>` (its
/// feature gate and its API version); none where it is on by default (1.36).
pub fn in_tree_map_flags(minor: u32) -> Vec<String> {
    match in_tree_map_api(minor) {
        Some(api) if minor < 36 => vec![
            "--feature-gates=MutatingAdmissionPolicy=true".to_string(),
            format!("--runtime-config={api}=true"),
        ],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minors_parse_from_the_variable_and_from_a_pin() {
        assert_eq!(parse_minor("1.30"), Some(30));
        assert_eq!(parse_minor("1.36.3"), Some(36));
        assert_eq!(parse_minor("2.30"), None);
        assert_eq!(parse_minor("1"), None);
        assert_eq!(parse_minor("1.x"), None);
    }

    #[test]
    fn in_tree_map_is_enabled_per_minor() {
        assert_eq!(in_tree_map_api(31), None);
        assert!(in_tree_map_flags(31).is_empty());
        assert_eq!(
            in_tree_map_flags(33),
            [
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1alpha1=true"
            ]
        );
        assert_eq!(
            in_tree_map_flags(35)[1],
            "--runtime-config=admissionregistration.k8s.io/v1beta1=true"
        );
        assert!(in_tree_map_flags(36).is_empty());
        assert_eq!(in_tree_map_api(36), Some("admissionregistration.k8s.io/v1"));
    }
}
