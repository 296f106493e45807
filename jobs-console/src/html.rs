//! The page frame (navigation, who is signed in, read-only mark), its style sheet, and small
//! pieces every page uses. Text is escaped by `maud` wherever it is inserted.

use std::time::Duration;

use axum::http::header;
use axum::response::IntoResponse;
use jobs_postgres::admin::HumanDuration;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::security::Visitor;
use crate::state::Console;

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Jobs,
    Dead,
    Schedules,
    Outbox,
    Workers,
    None,
}

/// The navigation entries: which, label, path.
const ENTRIES: [(Nav, &str, &str); 6] = [
    (Nav::Overview, "Overview", "/"),
    (Nav::Jobs, "Jobs", "/jobs"),
    (Nav::Dead, "Dead letters", "/dead"),
    (Nav::Schedules, "Schedules", "/schedules"),
    (Nav::Outbox, "Outbox", "/outbox"),
    (Nav::Workers, "Workers", "/workers"),
];

/// A whole page: `body` in the console's frame.
pub(crate) fn page(
    console: &Console,
    visitor: Option<&Visitor>,
    current: Nav,
    title: &str,
    body: Markup,
) -> Markup {
    page_with_head(console, visitor, current, title, html! {}, body)
}

/// A whole page with extra elements in its head (a refresh, say).
pub(crate) fn page_with_head(
    console: &Console,
    visitor: Option<&Visitor>,
    current: Nav,
    title: &str,
    head: Markup,
    body: Markup,
) -> Markup {
    let config = &console.config;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · jobs" }
                link rel="stylesheet" href=(config.href("/console.css"));
                (head)
            }
            body {
                header {
                    a class="brand" href=(config.href("/")) { "jobs" }
                    nav {
                        @for (entry, label, path) in ENTRIES {
                            @if entry == current {
                                a class="current" href=(config.href(path)) aria-current="page" { (label) }
                            } @else {
                                a href=(config.href(path)) { (label) }
                            }
                        }
                    }
                    div class="who" {
                        @if config.read_only { span class="badge" { "read-only" } }
                        @if let Some(visitor) = visitor {
                            span { (visitor.actor) }
                            @if visitor.signed_in {
                                form method="post" action=(config.href("/logout")) class="inline" {
                                    (csrf_field(visitor))
                                    button type="submit" class="link" { "Sign out" }
                                }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The hidden field carrying the visitor's CSRF token, for every form.
pub(crate) fn csrf_field(visitor: &Visitor) -> Markup {
    html! { input type="hidden" name="csrf" value=(visitor.csrf); }
}

/// A button that POSTs `fields` to `path`, for one action on one thing.
pub(crate) fn action_button(
    console: &Console,
    visitor: &Visitor,
    path: &str,
    label: &str,
    fields: &[(&str, &str)],
) -> Markup {
    if console.config.read_only {
        return html! {};
    }
    html! {
        form method="post" action=(console.config.href(path)) class="inline" {
            (csrf_field(visitor))
            @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
            button type="submit" { (label) }
        }
    }
}

/// A duration for people ("3m12s"), or a dash.
pub(crate) fn age(duration: Option<Duration>) -> String {
    duration.map_or_else(
        || "–".to_owned(),
        |duration| HumanDuration(duration).to_string(),
    )
}

/// A notice at the top of a page, after an action.
pub(crate) fn notice(text: &str) -> Markup {
    html! { p class="notice" role="status" { (text) } }
}

/// A pretty-printed JSON value, or the hidden mark.
pub(crate) fn payload(console: &Console, value: &serde_json::Value) -> Markup {
    if console.config.hide_payloads {
        return html! { p class="muted" { "Hidden (the console was started with --hide-payloads)." } };
    }
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre class="payload" { (text) } }
}

/// The style sheet, served at `/console.css`.
pub(crate) async fn style_sheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        PreEscaped(STYLE).into_string(),
    )
}

const STYLE: &str = r#"
:root { --fg: #1d2430; --muted: #667085; --line: #e4e7ec; --bg: #f8f9fb; --accent: #2f5bd3;
        --bad: #b42318; --warn: #b54708; --ok: #067647; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); background: var(--bg); }
header { display: flex; gap: 24px; align-items: center; padding: 10px 24px; background: #fff;
         border-bottom: 1px solid var(--line); }
header .brand { font-weight: 700; font-size: 16px; color: var(--fg); text-decoration: none; }
header nav { display: flex; gap: 4px; flex: 1; }
header nav a { padding: 6px 10px; border-radius: 6px; color: var(--muted); text-decoration: none; }
header nav a.current { background: var(--bg); color: var(--fg); font-weight: 600; }
header .who { display: flex; gap: 10px; align-items: center; color: var(--muted); }
main { padding: 16px 24px 48px; max-width: 1280px; }
h1 { font-size: 20px; margin: 8px 0 16px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line);
         vertical-align: top; }
th { font-weight: 600; color: var(--muted); background: #fcfcfd; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
a { color: var(--accent); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; background: #eef2ff;
         color: var(--accent); font-size: 12px; font-weight: 600; }
.badge.bad { background: #fef3f2; color: var(--bad); }
.badge.warn { background: #fffaeb; color: var(--warn); }
.badge.ok { background: #ecfdf3; color: var(--ok); }
.bad { color: var(--bad); }
.muted { color: var(--muted); }
.notice { padding: 8px 12px; background: #ecfdf3; border: 1px solid #abefc6; border-radius: 6px; }
.problem p { max-width: 720px; }
form.inline { display: inline; margin: 0; }
form.filters { display: flex; flex-wrap: wrap; gap: 8px; align-items: end; margin-bottom: 12px; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
input, select { font: inherit; padding: 4px 6px; border: 1px solid #d0d5dd; border-radius: 6px; }
button { font: inherit; padding: 4px 10px; border: 1px solid #d0d5dd; border-radius: 6px;
         background: #fff; cursor: pointer; }
button.danger { border-color: #fda29b; color: var(--bad); }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button.link { border: 0; background: none; color: var(--accent); padding: 0; }
.actions { display: flex; gap: 8px; margin: 12px 0; flex-wrap: wrap; }
pre.payload, pre.error { background: #fff; border: 1px solid var(--line); padding: 10px;
                         overflow: auto; max-height: 420px; white-space: pre-wrap;
                         word-break: break-word; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; background: #fff;
           border: 1px solid var(--line); padding: 12px; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
.login { max-width: 360px; background: #fff; border: 1px solid var(--line); padding: 16px;
         border-radius: 8px; display: flex; flex-direction: column; gap: 10px; }
.pager { margin-top: 12px; }
svg.chart { display: block; }
tr.current td { background: #eef2ff; }
"#;
