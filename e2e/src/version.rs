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

/// The versions of the in-tree policy kinds by the minors that serve them (first, last; `u32::MAX`:
/// still served): ValidatingAdmissionPolicy's v1alpha1 until 1.31 and v1beta1 until 1.33,
/// MutatingAdmissionPolicy's v1alpha1 from 1.32 and v1beta1 from 1.34. A binding follows its
/// policy.
const POLICY_VERSIONS: [(&str, &str, u32, u32); 6] = [
    ("ValidatingAdmissionPolicy", "v1alpha1", 26, 31),
    ("ValidatingAdmissionPolicy", "v1beta1", 28, 33),
    ("ValidatingAdmissionPolicy", "v1", 30, u32::MAX),
    ("MutatingAdmissionPolicy", "v1alpha1", 32, u32::MAX),
    ("MutatingAdmissionPolicy", "v1beta1", 34, u32::MAX),
    ("MutatingAdmissionPolicy", "v1", 36, u32::MAX),
];

/// The (version, policy kind) pairs of `admissionregistration.k8s.io` that `1.<minor>` serves
/// with [`in_tree_policy_flags`], sorted.
pub fn in_tree_policy_versions(minor: u32) -> Vec<(&'static str, &'static str)> {
    let mut served: Vec<_> = POLICY_VERSIONS
        .iter()
        .filter(|(_, _, first, last)| (*first..=*last).contains(&minor))
        .map(|&(kind, version, _, _)| (version, kind))
        .collect();
    served.sort_unstable();
    served
}

/// kube-apiserver flags that serve every version of the in-tree policy kinds `1.<minor>` has:
/// `v1beta1` and `v1alpha1` (off by default) and, in 1.32–1.35, MutatingAdmissionPolicy's
/// feature gate.
pub fn in_tree_policy_flags(minor: u32) -> Vec<String> {
    let mut flags = vec![
        "--runtime-config=admissionregistration.k8s.io/v1beta1=true,admissionregistration.k8s.io/v1alpha1=true"
            .to_string(),
    ];
    if (32..36).contains(&minor) {
        flags.push("--feature-gates=MutatingAdmissionPolicy=true".to_string());
    }
    flags
}

/// CEL calls by the Kubernetes minor whose in-tree plugin first accepts them in a new policy:
/// a library introduced in `1.<n>` (kube-apiserver's base environment) is allowed from the
/// cluster whose default compatibility version is `1.<n>`, that is `1.<n+1>`.
const CEL_CALLS_SINCE: [(&str, u32); 20] = [
    (".sortBy(", 35),
    (".sort()", 35),
    (".distinct()", 35),
    (".flatten(", 35),
    (".reverse()", 35),
    (".slice(", 35),
    ("lists.range(", 35),
    ("semver(", 34),
    ("isSemver(", 34),
    (".transformList(", 33),
    (".transformMap(", 33),
    (".transformMapEntry(", 33),
    ("format.", 32),
    ("ip(", 31),
    ("cidr(", 31),
    ("isIP(", 31),
    ("isCIDR(", 31),
    ("ip.isCanonical(", 31),
    (".containsIP(", 31),
    (".containsCIDR(", 31),
];

/// The oldest minor whose in-tree plugin accepts every CEL call of `policies` (YAML) in a new
/// policy (30 when none is newer): differential scenarios need a cluster at least that new.
/// Two-variable `all`/`exists`/`existsOne` (1.33) are found by their two leading identifiers.
pub fn cel_minor_needed(policies: &str) -> u32 {
    let mut needed = CEL_CALLS_SINCE
        .iter()
        .filter(|(call, _)| policies.contains(call))
        .map(|&(_, minor)| minor)
        .max()
        .unwrap_or(30);
    for macro_name in [".all(", ".exists(", ".existsOne("] {
        for (at, _) in policies.match_indices(macro_name) {
            let args = &policies[at + macro_name.len()..];
            let mut parts = args.splitn(3, ',');
            let ident = |p: Option<&str>| {
                p.map(str::trim).is_some_and(|p| {
                    !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
            };
            if ident(parts.next()) && ident(parts.next()) && parts.next().is_some() {
                needed = needed.max(33);
            }
        }
    }
    needed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_need_the_minor_whose_in_tree_default_has_their_libraries() {
        assert_eq!(cel_minor_needed("object.spec.replicas > 1"), 30);
        assert_eq!(cel_minor_needed("isIP(object.x)"), 31);
        assert_eq!(cel_minor_needed("x.all(i, v, v > 0) && isIP(y)"), 33);
        assert_eq!(cel_minor_needed("x.all(c, c.name != '')"), 30);
        assert_eq!(cel_minor_needed("[2, 1].sortBy(x, x)"), 35);
    }

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

    #[test]
    fn older_policy_versions_are_served_per_minor() {
        assert_eq!(
            in_tree_policy_versions(30),
            [
                ("v1", "ValidatingAdmissionPolicy"),
                ("v1alpha1", "ValidatingAdmissionPolicy"),
                ("v1beta1", "ValidatingAdmissionPolicy")
            ]
        );
        assert_eq!(
            in_tree_policy_versions(34),
            [
                ("v1", "ValidatingAdmissionPolicy"),
                ("v1alpha1", "MutatingAdmissionPolicy"),
                ("v1beta1", "MutatingAdmissionPolicy")
            ]
        );
        assert_eq!(in_tree_policy_flags(31).len(), 1);
        assert_eq!(
            in_tree_policy_flags(33)[1],
            "--feature-gates=MutatingAdmissionPolicy=true"
        );
        assert_eq!(in_tree_policy_flags(36).len(), 1);
    }
}
