//! The `admission.celgate.io/v1` API: ValidatingAdmissionPolicy, MutatingAdmissionPolicy and their
//! bindings. Specs are field for field those of `admissionregistration.k8s.io/v1` (Kubernetes 1.36),
//! so a policy written for the in-tree API applies with only its `apiVersion` changed. The
//! `admission.celgate.io/v1alpha1` PolicyException, which in-tree has no equivalent of, excepts
//! requests from validating policies until it expires.

// `#[kube(printcolumn(...))]` repeats the same keys once per column by design.
#![allow(clippy::duplicated_attributes)]

pub mod common;
pub mod exception;
pub mod mutating;
pub mod validating;

pub use common::*;
pub use exception::*;
pub use mutating::*;
pub use validating::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

/// The API group of every celgate kind.
pub const GROUP: &str = "admission.celgate.io";

/// The CRDs of the five kinds, in a stable order, each with its file name under `config/crd/`.
pub fn crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    let mut crds = vec![
        (
            "validatingadmissionpolicies.yaml",
            ValidatingAdmissionPolicy::crd(),
        ),
        (
            "validatingadmissionpolicybindings.yaml",
            ValidatingAdmissionPolicyBinding::crd(),
        ),
        (
            "mutatingadmissionpolicies.yaml",
            MutatingAdmissionPolicy::crd(),
        ),
        (
            "mutatingadmissionpolicybindings.yaml",
            MutatingAdmissionPolicyBinding::crd(),
        ),
        ("policyexceptions.yaml", PolicyException::crd()),
    ];
    for (_, crd) in &mut crds {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                strip_nullable(schema);
            }
        }
    }
    crds
}

/// Removes `nullable: true`, which the derive adds to every optional field. The in-tree API
/// drops an explicit `null` and then applies the default; a nullable CRD field would keep the
/// `null` and skip the default, so optional here means "may be absent", as upstream.
fn strip_nullable(schema: &mut JSONSchemaProps) {
    schema.nullable = None;
    let children = schema
        .properties
        .iter_mut()
        .flat_map(|p| p.values_mut())
        .chain(schema.items.iter_mut().filter_map(|i| match i {
            JSONSchemaPropsOrArray::Schema(s) => Some(s.as_mut()),
            JSONSchemaPropsOrArray::Schemas(_) => None,
        }))
        .chain(
            schema
                .additional_properties
                .iter_mut()
                .filter_map(|a| match a {
                    JSONSchemaPropsOrBool::Schema(s) => Some(s.as_mut()),
                    JSONSchemaPropsOrBool::Bool(_) => None,
                }),
        );
    for child in children {
        strip_nullable(child);
    }
}

/// The error rendering YAML.
pub type YamlError = serde_saphyr::ser::Error;

/// Renders a CRD as the YAML committed under `config/crd/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, YamlError> {
    let body = serde_saphyr::to_string(crd)?;
    Ok(format!(
        "# Generated from crds/src by `make crds`; do not edit.\n{body}"
    ))
}
