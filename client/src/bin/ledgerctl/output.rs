//! How results are printed: aligned tables and `key: value` lines for people, or one JSON
//! document per result for scripts (`--output json`). Field names in JSON are those of
//! the core types (`EffectRecord`, `ClaimOutcome`, `ToolPolicy`, ...) or, for views this
//! binary builds, the `snake_case` names its structs declare; both stay as they are.

use std::fmt::Display;
use std::io::Write;

use clap::ValueEnum;
use serde::Serialize;

/// Prints one line on standard output, like `println!`; a reader that went away (`head`)
/// ends the process quietly instead of with a panic.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use say;

/// Creates (or truncates) `path` readable and writable by its owner only, an existing
/// file included: backups and exports hold every record, receipts and intents included.
pub fn create_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(file)
}

/// Writes `text` to standard output; exits quietly when the reader has gone away.
pub fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("ledgerctl: cannot write to standard output: {e}");
        std::process::exit(2);
    }
}

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned tables and `key: value` lines.
    Table,
    /// One JSON document per result.
    Json,
}

/// A table whose columns are as wide as their widest cell, separated by two spaces.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names (printed upper-case).
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| h.to_uppercase()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row after the header; no trailing spaces.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(String::len).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(cell.len());
                }
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map(String::as_str).unwrap_or("");
                line.push_str(&format!("{cell:<width$}  "));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table to standard output.
    pub fn print(&self) {
        write_stdout(&self.render());
    }
}

/// `key: value` lines with the values aligned.
pub fn print_fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    for (key, value) in fields {
        let key = format!("{key}:");
        say!("{}", format!("{key:<width$} {value}").trim_end());
    }
}

/// A value, or `-` when absent.
pub fn or_dash<T: Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// One JSON document on a line.
pub fn json_line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"unprintable\":\"{e}\"}}"))
}

/// Prints one JSON document on standard output.
pub fn print_json<T: Serialize>(value: &T) {
    say!("{}", json_line(value));
}

/// Writes one JSON document per line to `out`.
pub fn write_json_line<T: Serialize>(out: &mut dyn Write, value: &T) -> std::io::Result<()> {
    writeln!(out, "{}", json_line(value))
}

/// A core outcome enum serialised as `{"Variant": {...}}` or `"Variant"`, as `outcome:`
/// followed by its fields, for people.
pub fn print_outcome<T: Serialize>(value: &T) {
    let value = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
    let (name, body) = match &value {
        serde_json::Value::Object(map) if map.len() == 1 => {
            let (name, body) = map.iter().next().expect("one member");
            (name.clone(), body.clone())
        }
        serde_json::Value::String(name) => (name.clone(), serde_json::Value::Null),
        other => (other.to_string(), serde_json::Value::Null),
    };
    let mut fields = vec![("outcome", snake(&name))];
    let mut body_fields = Vec::new();
    match body {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                body_fields.push((k, plain(&v)));
            }
        }
        serde_json::Value::Null => {}
        other => body_fields.push(("value".to_owned(), plain(&other))),
    }
    fields.extend(body_fields.iter().map(|(k, v)| (k.as_str(), v.clone())));
    print_fields(&fields);
}

/// A JSON value as people read it: strings without quotes, `-` for null.
pub fn plain(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// `InFlight` -> `in_flight`.
pub fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut t = Table::new(&["key", "state"]);
        t.row(vec!["acme/a/long-key".into(), "committed".into()]);
        t.row(vec!["acme/a/k".into(), "-".into()]);
        assert_eq!(
            t.render(),
            "KEY              STATE\nacme/a/long-key  committed\nacme/a/k         -\n"
        );
    }

    #[test]
    fn variant_names_become_snake_case() {
        assert_eq!(snake("InFlight"), "in_flight");
        assert_eq!(snake("Proceed"), "proceed");
    }
}
