//! `kubectl get gpus` without kubectl: the table of the CRD's printer columns, read from the
//! same declaration that makes the CRD, so that what a test sees is what an operator sees.

use serde_json::Value;

/// The table for these objects: `NAME` and each printer column, one row per object,
/// columns padded as kubectl pads them. A field that is not set prints `<none>`.
pub fn table(objects: &[Value]) -> String {
    let crd = super::crd();
    let columns: Vec<(String, String)> = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.additional_printer_columns.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.name.to_uppercase(), c.json_path))
        .collect();
    let mut rows = vec![std::iter::once("NAME".to_string())
        .chain(columns.iter().map(|(name, _)| name.clone()))
        .collect::<Vec<_>>()];
    for object in objects {
        let name = field(object, ".metadata.name");
        rows.push(
            std::iter::once(name)
                .chain(columns.iter().map(|(_, path)| field(object, path)))
                .collect(),
        );
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            cells.join("   ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A field by a simple JSON path (`.status.allocated.core`), as kubectl prints it.
fn field(object: &Value, path: &str) -> String {
    let pointer = path.replace('.', "/");
    match object.pointer(&pointer) {
        None | Some(Value::Null) => "<none>".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_the_printer_columns() {
        let gpu = serde_json::json!({
            "metadata": {"name": "gpu-ab"},
            "spec": {"node": "node-a", "model": "A100"},
            "status": {"allocated": {"core": 60}, "memory": "8GiB/40GiB", "pods": 2},
        });
        let text = table(&[gpu]);
        let lines: Vec<&str> = text.lines().collect();
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(
            header,
            ["NAME", "NODE", "MODEL", "CORE", "MEMORY", "PODS", "AGE"]
        );
        let row: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "gpu-ab",
                "node-a",
                "A100",
                "60",
                "8GiB/40GiB",
                "2",
                "<none>"
            ]
        );
    }
}
