//! The printed result: settings first, then one line per measurement.

use crate::measure::spread;
use crate::options::Options;

/// One line of the table.
pub struct Line {
    pub workload: String,
    pub framework: String,
    pub ceiling: String,
    pub result: String,
    pub target: String,
}

/// Everything measured in this run.
pub struct Report {
    settings: Vec<(String, String)>,
    lines: Vec<Line>,
    notes: Vec<String>,
}

impl Report {
    /// Starts a report, reading the server's version.
    pub async fn new(options: &Options) -> Result<Self, Box<dyn std::error::Error>> {
        let fresh = crate::measure::Fresh::new(1).await?;
        let version: String = sqlx::query_scalar("SHOW server_version")
            .fetch_one(&fresh.pool)
            .await?;
        let synchronous_commit: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&fresh.pool)
            .await?;
        // Production servers vacuum on their own; a CI server may not, which flatters nothing
        // and slows a long run: say which this run had.
        let autovacuum: String = sqlx::query_scalar("SHOW autovacuum")
            .fetch_one(&fresh.pool)
            .await?;
        if autovacuum != "on" {
            eprintln!(
                "warning: autovacuum is {autovacuum} on this server; production servers run with it on: \
                 ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf(); then measure again"
            );
        }
        let claim_ahead = jobs::WorkerConfig::default().claim_ahead;
        let settings = vec![
            (
                "PostgreSQL".into(),
                format!("{version} (synchronous_commit = {synchronous_commit}, autovacuum = {autovacuum})"),
            ),
            ("runs per workload".into(), format!("{} (ratio: median [min, max])", options.runs)),
            (
                "enqueue, 1 per tx".into(),
                format!(
                    "{} transactions per side over each of {:?} connections, in {} blocks per side, sides alternating block by block; each inserts 1 business row + 1 job",
                    options.single_enqueues, options.enqueue_connections, crate::workloads::enqueue::ROUNDS
                ),
            ),
            (
                "bulk enqueue".into(),
                format!("{} jobs per call, {} times per side and run, sides alternating (framework in a transaction: one statement, shared values once and a payload array through UNNEST, returning ids; on their own: ids reserved, then a text COPY on a connection of their own; ceilings: the same rows from an UNNEST multi-row INSERT returning nothing, and a text COPY from the client)", options.bulk_jobs, crate::workloads::bulk::ROUNDS),
            ),
            (
                "drain".into(),
                format!(
                    "{} no-op jobs; concurrency {:?}; framework claims up to its free slots per statement, and up to {} more under a backlog of short jobs (claim_ahead; the next claim goes out, for jobs ahead alone, while they start); raw batched: concurrency/{} loops claiming {} each; raw per-job: one loop per slot claiming 1",
                    options.drain_jobs, options.drain_concurrency, claim_ahead, options.raw_batch, options.raw_batch
                ),
            ),
            (
                "crash window, batched".into(),
                format!("outcomes handed to the completer but not yet written (one statement of up to 500, plus those queued behind it) are lost, and so are the jobs claimed ahead but not started (up to twice {claim_ahead} per queue); those jobs run again after their lease (30 s)"),
            ),
            (
                "crash window, per-job".into(),
                format!("runs in progress are lost, and so are the jobs claimed ahead but not started (up to twice {claim_ahead} per queue); they run again after their lease (30 s)"),
            ),
            (
                "claims, both sides".into(),
                "commit without waiting for their WAL flush (outcomes and enqueues wait): a database crash can lose a claim, and that job runs again".into(),
            ),
        ];
        Ok(Self {
            settings,
            lines: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// Adds a ratio line: per-run framework and ceiling rates (per second).
    pub fn ratio(
        &mut self,
        workload: &str,
        framework: &[f64],
        ceiling: &[f64],
        unit: &str,
        target: &str,
    ) {
        let ratios: Vec<f64> = framework
            .iter()
            .zip(ceiling)
            .map(|(framework, ceiling)| framework / ceiling)
            .collect();
        let (median, min, max) = spread(&ratios);
        self.lines.push(Line {
            workload: workload.to_string(),
            framework: format!("{:.0} {unit}", spread(framework).0),
            ceiling: format!("{:.0} {unit}", spread(ceiling).0),
            result: format!("{median:.2} [{min:.2}, {max:.2}]"),
            target: target.to_string(),
        });
    }

    /// Adds a line with a free-form result.
    pub fn line(
        &mut self,
        workload: &str,
        framework: String,
        ceiling: String,
        result: String,
        target: &str,
    ) {
        self.lines.push(Line {
            workload: workload.to_string(),
            framework,
            ceiling,
            result,
            target: target.to_string(),
        });
    }

    /// Adds a note printed under the table.
    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// Prints the settings, the table and the notes.
    pub fn print(&self) {
        println!("\n## Settings\n");
        for (name, value) in &self.settings {
            println!("- {name}: {value}");
        }
        println!("\n## Results (framework / raw-SQL ceiling, same run)\n");
        let widths = [
            self.width(|line| &line.workload, "workload"),
            self.width(|line| &line.framework, "framework"),
            self.width(|line| &line.ceiling, "ceiling"),
            self.width(|line| &line.result, "ratio or result"),
            self.width(|line| &line.target, "target"),
        ];
        let row = |cells: [&str; 5]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            println!("| {} |", padded.join(" | "));
        };
        row([
            "workload",
            "framework",
            "ceiling",
            "ratio or result",
            "target",
        ]);
        let rule: Vec<String> = widths.iter().map(|width| "-".repeat(*width)).collect();
        println!("|-{}-|", rule.join("-|-"));
        for line in &self.lines {
            row([
                &line.workload,
                &line.framework,
                &line.ceiling,
                &line.result,
                &line.target,
            ]);
        }
        if !self.notes.is_empty() {
            println!();
            for note in &self.notes {
                println!("- {note}");
            }
        }
    }

    fn width(&self, cell: impl Fn(&Line) -> &String, header: &str) -> usize {
        self.lines
            .iter()
            .map(|line| cell(line).chars().count())
            .chain([header.len()])
            .max()
            .unwrap_or(0)
    }
}
