//! The model status table Triton logs once the start-up loads are done (core
//! `server.cc`, after start-up): one row per model version tried, its state and, when
//! it is not ready, why. Operators read it to see at a glance what failed and QA scripts
//! grep it for a load error's text, which it shows unescaped.

use super::manager::{IndexEntry, ModelRepository};
use crate::error::Result;

impl ModelRepository {
    /// The table of every model version the repository tried (loaded or failed), as
    /// Triton prints it: `Model | Version | Status`, the status `READY` or
    /// `UNAVAILABLE: <reason>`.
    pub async fn status_table(&self) -> Result<String> {
        let entries = self.index(false).await?;
        let rows: Vec<[String; 3]> = entries.iter().filter_map(status_row).collect();
        Ok(text_table(&["Model", "Version", "Status"], &rows))
    }
}

/// A tried version's row; `None` for a model directory nothing tried to load.
fn status_row(entry: &IndexEntry) -> Option<[String; 3]> {
    let state = entry.state?;
    let version = entry
        .version
        .map_or_else(|| "-".to_string(), |v| v.to_string());
    let status = match entry.reason.is_empty() {
        true => state.as_str().to_string(),
        false => format!("{}: {}", state.as_str(), entry.reason),
    };
    Some([entry.name.clone(), version, status])
}

/// A text table in Triton's frame: `+---+` rules above and below the header and at the
/// end, `| cell |` rows padded to each column's widest line; a cell with several lines
/// takes as many table lines.
fn text_table<const N: usize>(headers: &[&str; N], rows: &[[String; N]]) -> String {
    let lines = |cell: &str| cell.split('\n').map(str::to_string).collect::<Vec<_>>();
    let header: [Vec<String>; N] = std::array::from_fn(|i| lines(headers[i]));
    let body: Vec<[Vec<String>; N]> = rows
        .iter()
        .map(|row| std::array::from_fn(|i| lines(&row[i])))
        .collect();
    let widths: [usize; N] = std::array::from_fn(|i| {
        std::iter::once(&header)
            .chain(&body)
            .flat_map(|row| row[i].iter().map(|l| l.chars().count()))
            .max()
            .unwrap_or(0)
    });
    let rule = widths.iter().fold(String::from("+"), |mut rule, w| {
        rule.push_str(&"-".repeat(w + 2));
        rule.push('+');
        rule
    });
    let row_lines = |row: &[Vec<String>; N]| -> Vec<String> {
        let height = row.iter().map(Vec::len).max().unwrap_or(1);
        (0..height)
            .map(|line| {
                let mut text = String::from("|");
                for (cell, width) in row.iter().zip(widths) {
                    let part = cell.get(line).map_or("", String::as_str);
                    let pad = width - part.chars().count();
                    text.push_str(&format!(" {part}{} |", " ".repeat(pad)));
                }
                text
            })
            .collect()
    };
    let mut out = vec![rule.clone()];
    out.extend(row_lines(&header));
    out.push(rule.clone());
    for row in &body {
        out.extend(row_lines(row));
    }
    out.push(rule);
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repository::record::ModelState;

    #[test]
    fn rows_pad_to_the_widest_cell_and_show_why_a_version_is_unavailable() {
        let entries = [
            IndexEntry {
                name: "a".into(),
                version: Some(1),
                state: Some(ModelState::Ready),
                reason: String::new(),
            },
            IndexEntry {
                name: "broken".into(),
                version: Some(1),
                state: Some(ModelState::Unavailable),
                reason: "Resource count for \"r\" is limited to 3".into(),
            },
            IndexEntry {
                name: "never_tried".into(),
                version: None,
                state: None,
                reason: String::new(),
            },
        ];
        let rows: Vec<[String; 3]> = entries.iter().filter_map(status_row).collect();
        let table = text_table(&["Model", "Version", "Status"], &rows);
        let expected = [
            "+--------+---------+-----------------------------------------------------+",
            "| Model  | Version | Status                                              |",
            "+--------+---------+-----------------------------------------------------+",
            "| a      | 1       | READY                                               |",
            "| broken | 1       | UNAVAILABLE: Resource count for \"r\" is limited to 3 |",
            "+--------+---------+-----------------------------------------------------+",
        ];
        assert_eq!(table, expected.join("\n"));
    }

    #[test]
    fn an_empty_table_is_its_header() {
        let table = text_table(&["Model", "Version", "Status"], &[]);
        assert_eq!(table.lines().count(), 4);
        assert!(table.ends_with("+-------+---------+--------+"));
    }
}
