//! `ferry run`: ferry commands from a file or stdin, one per line, run in parallel (as
//! s5cmd's `run`). Lines are split like a shell would (quotes and backslashes, no
//! expansion); blank lines and `#` comments are skipped. Every line shares one client
//! (common.rs caches it per settings), so thousands of small commands reuse the same
//! connections. A line that fails is reported with its number; the others go on, and
//! the exit code is 1 if any failed. Lines that are not data commands (serve, bench,
//! run itself, perfdiag, whose figures would carry the other lines' load) are refused,
//! each with its line number.

use crate::common::{usage, Global, PartialFailure};
use anyhow::{Context, Result};
use clap::{Args, Parser};
use futures_util::stream::StreamExt;
use std::io::BufRead;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:
  printf 'cp a.txt s3://bucket/a.txt\\ncp b.txt s3://bucket/b.txt\\n' | ferry run
  ferry run commands.txt          # one command per line, without the leading 'ferry'
  ferry run -c 128 commands.txt   # up to 128 lines at once")]
pub struct RunArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// A file of commands; '-' or none reads stdin.
    pub file: Option<String>,
}

/// Splits a command line into words: whitespace separates, '...' is literal, "..."
/// allows \" and \\, a backslash outside quotes escapes the next character.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated ' quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("unterminated \" quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated \" quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err("a trailing backslash".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

pub async fn run(args: RunArgs, g: &Global) -> Result<()> {
    let reader: Box<dyn BufRead + Send> = match args.file.as_deref() {
        None | Some("-") => Box::new(std::io::BufReader::new(std::io::stdin())),
        Some(p) => Box::new(std::io::BufReader::new(
            std::fs::File::open(p).with_context(|| p.to_owned()).map_err(|e| usage(crate::common::explain(&e)))?,
        )),
    };
    // Each line's own progress display would fight over the terminal: none inside.
    let mut base = g.clone();
    base.no_progress = true;
    let failed = AtomicU64::new(0);
    let total = AtomicU64::new(0);
    let lines = futures_util::stream::iter(reader.lines().enumerate());
    lines
        .for_each_concurrent(g.concurrency(), |(n, line)| {
            let base = &base;
            let failed = &failed;
            let total = &total;
            async move {
                let n = n + 1;
                let fail = |msg: String| {
                    failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("ferry: error: line {n}: {msg}");
                };
                let line = match line {
                    Ok(l) => l,
                    Err(e) => return fail(format!("reading commands: {e}")),
                };
                let text = line.trim();
                if text.is_empty() || text.starts_with('#') {
                    return;
                }
                total.fetch_add(1, Ordering::Relaxed);
                let words = match split_words(text) {
                    Ok(w) => w,
                    Err(e) => return fail(format!("{text}: {e}")),
                };
                let words =
                    if words.first().map(String::as_str) == Some("ferry") { words[1..].to_vec() } else { words };
                let cli = match crate::Cli::try_parse_from(std::iter::once("ferry".to_owned()).chain(words)) {
                    Ok(c) => c,
                    Err(e) => {
                        return fail(format!("{text}: {}", e.to_string().lines().next().unwrap_or("bad command")))
                    }
                };
                if let crate::Command::Perfdiag(_) = cli.command {
                    // Its figures would be the other lines' load as much as the endpoint's.
                    return fail(format!(
                        "{text}: perfdiag measures the endpoint and must run alone: run it as its own command, not inside run"
                    ));
                }
                if matches!(cli.command, crate::Command::Run(_) | crate::Command::Serve(_) | crate::Command::Bench(_)) {
                    return fail(format!(
                        "{text}: run takes data commands only (ls, cp, sync, rm, cat, stat, mb, rb, presign)"
                    ));
                }
                let g = base.merged(&cli.global);
                if let Err(e) = Box::pin(crate::dispatch(cli.command, g)).await {
                    if e.downcast_ref::<PartialFailure>().is_some() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        fail(format!("{text}: {}", crate::common::explain(&e)));
                    }
                }
            }
        })
        .await;
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(anyhow::Error::new(PartialFailure { failed, total: total.load(Ordering::Relaxed) }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_a_shell() {
        assert_eq!(split_words("cp a  b").unwrap(), vec!["cp", "a", "b"]);
        assert_eq!(split_words(r#"cp 'a b' "c \"d\"" e\ f"#).unwrap(), vec!["cp", "a b", "c \"d\"", "e f"]);
        assert_eq!(split_words("cp 's3://b/*.txt' ''").unwrap(), vec!["cp", "s3://b/*.txt", ""]);
        assert!(split_words("cp 'a").is_err());
        assert!(split_words("cp \"a").is_err());
        assert!(split_words("").unwrap().is_empty());
    }
}
