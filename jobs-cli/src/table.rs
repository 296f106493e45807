//! Plain-text tables: a header, aligned columns, two spaces between them.

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A table being filled in.
pub struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &[(&'static str, Align)]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row, one cell per column; control characters in a cell are escaped (see
    /// [`shown`](crate::escape::shown)), so no cell can break the table or drive the terminal.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .iter()
                .map(|cell| crate::escape::shown(cell))
                .collect(),
        );
    }

    /// The table as text, one line per row after the header, each ending in a newline.
    pub fn render(&self) -> String {
        let header: Vec<String> = self
            .columns
            .iter()
            .map(|(name, _)| name.to_string())
            .collect();
        let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let last = row.len().saturating_sub(1);
            let mut line = String::new();
            for (index, cell) in row.iter().enumerate() {
                let width = widths.get(index).copied().unwrap_or(0);
                let align = self
                    .columns
                    .get(index)
                    .map_or(Align::Left, |(_, align)| *align);
                let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
                if index > 0 {
                    line.push_str("  ");
                }
                match align {
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(cell);
                    }
                    Align::Left if index == last => line.push_str(cell),
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&pad);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_text_left_and_numbers_right() {
        let mut table = Table::new(&[("QUEUE", Align::Left), ("READY", Align::Right)]);
        table.row(vec!["email".into(), "3".into()]);
        table.row(vec!["default".into(), "1200".into()]);
        assert_eq!(
            table.render(),
            "QUEUE    READY\nemail        3\ndefault   1200\n"
        );
    }
}
