//! A borrowed view of an `admission.k8s.io/v1` AdmissionRequest: the attributes matching needs,
//! read once from the decoded JSON, with `object`, `oldObject` and the request itself left in
//! place for CEL to read without a copy.

use serde_json::{Map, Value};
use thiserror::Error;

use crate::json_text::LazyJson;

/// Why an AdmissionRequest cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RequestError {
    /// A required field is absent.
    #[error("request.{0} is required")]
    Missing(&'static str),
    /// A field has the wrong JSON type.
    #[error("request.{field} must be {want}")]
    WrongType {
        /// Path of the field below `request`.
        field: &'static str,
        /// The JSON type it must have.
        want: &'static str,
    },
    /// `operation` is not one Kubernetes sends.
    #[error("request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, not {0:?}")]
    Operation(String),
    /// `object` or `oldObject` was read and is not a JSON value celgate can hold.
    #[error("request.{field} cannot be decoded: {why}")]
    Undecodable {
        /// `object` or `oldObject`.
        field: &'static str,
        /// What the decoder said.
        why: String,
    },
}

/// The operation of an admission request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// CREATE
    Create,
    /// UPDATE
    Update,
    /// DELETE
    Delete,
    /// CONNECT
    Connect,
}

impl Operation {
    /// The operation as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// A group/version/resource (or kind) triple borrowed from the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupVersionName<'a> {
    /// API group, empty for the core group.
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Resource (plural) or kind, by context.
    pub name: &'a str,
}

/// The attributes of one admission request.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The `request` object, bound as CEL `request` (whose type has no `object` or
    /// `oldObject`, which [`Request::object`] and [`Request::old_object`] read).
    pub raw: &'a Value,
    /// The request uid, echoed in the response.
    pub uid: &'a str,
    /// The operation.
    pub operation: Operation,
    /// Kind of the object as the webhook received it.
    pub kind: GroupVersionName<'a>,
    /// Resource as the webhook received it.
    pub resource: GroupVersionName<'a>,
    /// Subresource, empty for the main resource.
    pub sub_resource: &'a str,
    /// Resource the client asked for (differs from `resource` after version conversion).
    pub request_resource: GroupVersionName<'a>,
    /// Subresource the client asked for.
    pub request_sub_resource: &'a str,
    /// Object name, empty when not yet known (generateName).
    pub name: &'a str,
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: &'a str,
    object: Object<'a>,
    old_object: Object<'a>,
    /// Whether `resource` differs from `request_resource` (a version conversion), known once.
    converted: bool,
}

/// Where a request's object is: in the request's JSON, or decoded on first read.
#[derive(Clone, Copy, Debug)]
enum Object<'a> {
    Decoded(&'a Value),
    Lazy(&'a LazyJson),
}

impl<'a> Object<'a> {
    fn get(self) -> &'a Value {
        match self {
            Object::Decoded(v) => v,
            Object::Lazy(lazy) => lazy.get(),
        }
    }

    fn cel(self) -> celgate_cel::Value<'a> {
        match self {
            Object::Decoded(v) => celgate_cel::Value::from_json(v),
            Object::Lazy(lazy) => lazy.cel(),
        }
    }

    fn owned(self) -> Value {
        match self {
            Object::Decoded(v) => v.clone(),
            Object::Lazy(lazy) => lazy.owned(),
        }
    }
}

static NULL: Value = Value::Null;

impl<'a> Request<'a> {
    /// Whether the API server converted the request: the resource celgate received differs
    /// from the one the client asked for.
    pub fn converted(&self) -> bool {
        self.converted
    }

    /// The new object; JSON null for DELETE. Decoded on first read when received as text.
    pub fn object(&self) -> &'a Value {
        self.object.get()
    }

    /// The new object as a value of the caller's own, to change: when received as text and
    /// not read yet, decoded into it without decoding the shared one (see [`LazyJson::owned`]).
    pub fn object_owned(&self) -> Value {
        self.object.owned()
    }

    /// The old object; JSON null for CREATE. Decoded on first read when received as text.
    pub fn old_object(&self) -> &'a Value {
        self.old_object.get()
    }

    /// The new object as CEL reads it: when received as text, read in place rather than
    /// decoded (see [`LazyJson::cel`]).
    pub fn cel_object(&self) -> celgate_cel::Value<'a> {
        self.object.cel()
    }

    /// The old object as CEL reads it (see [`Request::cel_object`]).
    pub fn cel_old_object(&self) -> celgate_cel::Value<'a> {
        self.old_object.cel()
    }

    /// Reads the attributes of the `request` member of an AdmissionReview.
    pub fn from_json(raw: &'a Value) -> Result<Self, RequestError> {
        let member = |key| Object::Decoded(raw.get(key).unwrap_or(&NULL));
        Self::read(raw, member("object"), member("oldObject"))
    }

    /// Reads the attributes of a request whose `object` and `oldObject` are held apart from
    /// its other members (`fields`).
    pub fn from_parts(
        fields: &'a Value,
        object: &'a LazyJson,
        old_object: &'a LazyJson,
    ) -> Result<Self, RequestError> {
        Self::read(fields, Object::Lazy(object), Object::Lazy(old_object))
    }

    fn read(
        raw: &'a Value,
        object: Object<'a>,
        old_object: Object<'a>,
    ) -> Result<Self, RequestError> {
        let map = raw.as_object().ok_or(RequestError::WrongType {
            field: "",
            want: "an object",
        })?;
        let uid = required_str(map, "uid")?;
        let operation = match required_str(map, "operation")? {
            "CREATE" => Operation::Create,
            "UPDATE" => Operation::Update,
            "DELETE" => Operation::Delete,
            "CONNECT" => Operation::Connect,
            other => return Err(RequestError::Operation(other.to_string())),
        };
        let kind = triple(map, "kind", "kind")?.ok_or(RequestError::Missing("kind"))?;
        let resource =
            triple(map, "resource", "resource")?.ok_or(RequestError::Missing("resource"))?;
        let sub_resource = optional_str(map, "subResource")?;
        let request_resource = triple(map, "requestResource", "resource")?.unwrap_or(resource);
        let request_sub_resource = match map.get("requestSubResource") {
            None => sub_resource,
            Some(_) => optional_str(map, "requestSubResource")?,
        };
        Ok(Request {
            raw,
            uid,
            operation,
            kind,
            resource,
            sub_resource,
            request_resource,
            request_sub_resource,
            name: optional_str(map, "name")?,
            namespace: optional_str(map, "namespace")?,
            object,
            old_object,
            converted: request_resource != resource,
        })
    }
}

fn required_str<'a>(
    map: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, RequestError> {
    match map.get(field) {
        None | Some(Value::Null) => Err(RequestError::Missing(field)),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RequestError::WrongType {
            field,
            want: "a string",
        }),
    }
}

fn optional_str<'a>(
    map: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, RequestError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RequestError::WrongType {
            field,
            want: "a string",
        }),
    }
}

fn triple<'a>(
    map: &'a Map<String, Value>,
    field: &'static str,
    name_key: &'static str,
) -> Result<Option<GroupVersionName<'a>>, RequestError> {
    let inner = match map.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(inner)) => inner,
        Some(_) => {
            return Err(RequestError::WrongType {
                field,
                want: "an object",
            });
        }
    };
    let get = |key: &str| match inner.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(_) => Err(RequestError::WrongType {
            field,
            want: "an object of strings",
        }),
    };
    let gvn = GroupVersionName {
        group: get("group")?,
        version: get("version")?,
        name: get(name_key)?,
    };
    if gvn.version.is_empty() || gvn.name.is_empty() {
        return Err(RequestError::WrongType {
            field,
            want: "an object with a version and a name",
        });
    }
    Ok(Some(gvn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_create() {
        let raw = json!({"uid": "u1", "operation": "CREATE",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "namespace": "ns", "object": {"spec": {"replicas": 3}}});
        let r = Request::from_json(&raw).expect("valid request");
        assert_eq!(r.operation, Operation::Create);
        assert_eq!(r.resource.name, "deployments");
        assert_eq!(r.request_resource, r.resource);
        assert_eq!(r.namespace, "ns");
        assert!(r.old_object().is_null());
        assert_eq!(r.object()["spec"]["replicas"], 3);
    }

    #[test]
    fn says_what_is_wrong() {
        let missing = json!({"uid": "u", "operation": "CREATE"});
        assert_eq!(
            Request::from_json(&missing).unwrap_err().to_string(),
            "request.kind is required"
        );
        let bad_op = json!({"uid": "u", "operation": "PATCH",
            "kind": {"version": "v1", "kind": "Pod"}, "resource": {"version": "v1", "resource": "pods"}});
        assert!(
            Request::from_json(&bad_op)
                .unwrap_err()
                .to_string()
                .contains("PATCH")
        );
        let bad_type = json!({"uid": 7});
        assert_eq!(
            Request::from_json(&bad_type).unwrap_err().to_string(),
            "request.uid must be a string"
        );
    }
}
