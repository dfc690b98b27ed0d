//! `celgate convert`: writes in-tree ValidatingAdmissionPolicies, MutatingAdmissionPolicies and
//! their bindings of any served version as celgate's `admission.celgate.io/v1` objects
//! ([`crate::intree`] converts them), ready for `kubectl apply -f -`.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::documents::{Document, STDIN, read_files};
use crate::intree::{Source, converted, source};
use crate::{CliError, EXIT_OK};

/// Arguments of `celgate convert`.
#[derive(clap::Args, Debug)]
pub struct ConvertArgs {
    /// Files of ValidatingAdmissionPolicies, MutatingAdmissionPolicies and their bindings
    /// (admissionregistration.k8s.io v1, v1beta1 or v1alpha1; several documents and `List`s
    /// each); `-` or none reads standard input.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Output format: YAML documents, or JSON (one object, or a `List` of several).
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// How `celgate convert` writes the objects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// YAML, one document per object.
    #[default]
    Yaml,
    /// JSON.
    Json,
}

/// Runs `celgate convert`: exit code 0 with every object written; a document that is not a
/// policy or binding (or of a version that does not exist) is an error that names it, and
/// nothing is written.
pub fn run(args: &ConvertArgs, out: &mut dyn std::io::Write) -> Result<u8, CliError> {
    let files = if args.files.is_empty() {
        vec![PathBuf::from(STDIN)]
    } else {
        args.files.clone()
    };
    let objects = convert_all(read_files(&files)?)?;
    match args.output {
        OutputFormat::Yaml => {
            for object in &objects {
                let yaml = serde_saphyr::to_string(object)
                    .map_err(|e| CliError::Internal(format!("cannot write YAML: {e}")))?;
                write!(out, "---\n{yaml}")?;
            }
        }
        OutputFormat::Json => {
            let value = match <[Value; 1]>::try_from(objects) {
                Ok([one]) => one,
                Err(several) => json!({"apiVersion": "v1", "kind": "List", "items": several}),
            };
            serde_json::to_writer_pretty(&mut *out, &value)
                .map_err(|e| CliError::Internal(e.to_string()))?;
            out.write_all(b"\n")?;
        }
    }
    Ok(EXIT_OK)
}

/// Each document as celgate's object; one that is neither an in-tree nor a celgate policy or
/// binding is an error.
fn convert_all(docs: Vec<Document>) -> Result<Vec<Value>, CliError> {
    let mut objects = Vec::with_capacity(docs.len());
    for doc in docs {
        if source(&doc)? == Source::Other {
            return Err(doc
                .error(format!(
                    "{} is not a ValidatingAdmissionPolicy, MutatingAdmissionPolicy or binding of admissionregistration.k8s.io; nothing was written",
                    doc.describe()
                ))
                .into());
        }
        objects.push(converted(doc)?.object);
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::parse;

    /// `celgate convert` of `text` written to a file of a scratch folder named `test` (tests run
    /// in parallel in one process).
    fn run_on(test: &str, text: &str, output: OutputFormat) -> Result<String, String> {
        let dir =
            std::env::temp_dir().join(format!("celgate-convert-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let file = dir.join("in.yaml");
        std::fs::write(&file, text).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        let result = run(
            &ConvertArgs {
                files: vec![file],
                output,
            },
            &mut out,
        );
        let _ = std::fs::remove_dir_all(&dir);
        result.map_err(|e| e.to_string())?;
        String::from_utf8(out).map_err(|e| e.to_string())
    }

    const TWO: &str = "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: MutatingAdmissionPolicy\n\
                       metadata: {name: m}\nspec: {reinvocationPolicy: Never}\n---\n\
                       apiVersion: admissionregistration.k8s.io/v1alpha1\nkind: MutatingAdmissionPolicyBinding\n\
                       metadata: {name: b}\nspec: {policyName: m, paramRef: {name: p}}\n";

    #[test]
    fn yaml_out_is_one_document_per_object_and_reads_back_as_celgate_v1() {
        let out = run_on("yaml", TWO, OutputFormat::Yaml).expect("converts");
        let docs = parse("out.yaml", &out).expect("YAML");
        let seen: Vec<(String, &str)> = docs.iter().map(|d| (d.describe(), d.name())).collect();
        assert_eq!(
            seen,
            vec![
                (
                    "admission.celgate.io/v1 MutatingAdmissionPolicy".into(),
                    "m"
                ),
                (
                    "admission.celgate.io/v1 MutatingAdmissionPolicyBinding".into(),
                    "b"
                ),
            ]
        );
        assert_eq!(docs[0].object["spec"]["failurePolicy"], "Fail");
        assert_eq!(
            docs[1].object["spec"]["paramRef"]["parameterNotFoundAction"],
            "Deny"
        );
    }

    #[test]
    fn json_out_is_the_object_or_a_list() {
        let several: Value =
            serde_json::from_str(&run_on("json-list", TWO, OutputFormat::Json).expect("converts"))
                .expect("JSON");
        assert_eq!(several["kind"], "List");
        assert_eq!(several["items"].as_array().map(Vec::len), Some(2));
        let first = TWO.split("---\n").next().unwrap_or_default();
        let one: Value =
            serde_json::from_str(&run_on("json-one", first, OutputFormat::Json).expect("converts"))
                .expect("JSON");
        assert_eq!(one["kind"], "MutatingAdmissionPolicy");
        assert_eq!(one["apiVersion"], "admission.celgate.io/v1");
    }

    #[test]
    fn a_document_of_another_kind_is_an_error_naming_it() {
        let text = format!(
            "{TWO}---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: w}}\n"
        );
        let err = run_on("other-kind", &text, OutputFormat::Yaml).expect_err("not a policy");
        assert!(
            err.ends_with(", document 3: admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration is not a \
                           ValidatingAdmissionPolicy, MutatingAdmissionPolicy or binding of admissionregistration.k8s.io; nothing was written"),
            "{err}"
        );
    }
}
