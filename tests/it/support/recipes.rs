//! Shell recipes taken from the project's Markdown and run as written: the blocks of a
//! document, and a runner that gives each its own process group (a recipe may leave
//! processes in the background, as a host's commands do) and keeps what it printed.

use std::path::Path;
use std::time::Duration;

/// The ```` ```sh ```` blocks of a Markdown file, in order.
pub fn sh_blocks(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        match (&mut open, line.trim_start().starts_with("```")) {
            (None, true) if line.trim() == "```sh" => open = Some(String::new()),
            (Some(block), true) => {
                blocks.push(std::mem::take(block));
                open = None;
            }
            (Some(block), false) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// What one recipe printed, and how it ended.
pub struct Ran {
    pub success: bool,
    pub output: String,
    /// Its process group, with whatever it left running in the background.
    group: i32,
}

impl Ran {
    /// Stops what the recipe left running (a receiver).
    pub fn stop_what_is_left(&self) {
        // Bash's own `kill`: procps-ng 4.0.2 (Debian 12) reads `kill -KILL -PGID` as pid -1
        // and signals every process it may.
        let _ = std::process::Command::new("bash")
            .args(["-c", &format!("kill -KILL -- -{} 2>/dev/null", self.group)])
            .status();
    }
}

/// Runs `block` under `bash -e -o pipefail` in `dir`, with `substitutions` made in its text
/// and `env` added to the environment, in a process group of its own.
pub async fn run(
    dir: &Path,
    block: &str,
    substitutions: &[(&str, String)],
    env: &[(&str, String)],
) -> Ran {
    let mut script = block.to_owned();
    for (from, to) in substitutions {
        script = script.replace(from, to);
    }
    let captured = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (captured.path().join("out"), captured.path().join("err"));
    // Files, not pipes: a job left in the background keeps a pipe open past the script's end.
    let mut child = tokio::process::Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", &script])
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .process_group(0)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let group = child.id().unwrap() as i32;
    let status = tokio::time::timeout(Duration::from_secs(240), child.wait()).await;
    let output = format!(
        "{}\n--- stderr\n{}",
        std::fs::read_to_string(&out_path).unwrap_or_default(),
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );
    let ran = Ran {
        success: matches!(status, Ok(Ok(s)) if s.success()),
        output,
        group,
    };
    if status.is_err() {
        ran.stop_what_is_left();
        panic!("a recipe ran over 240 s:\n{script}\n{}", ran.output);
    }
    ran
}

/// `SELECT count(*) AS n ...` on the database at `url`, 0 while it cannot be read.
pub async fn count_at(url: &str, sql: &str) -> i64 {
    use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let Ok(mut conn) = AsyncPgConnection::establish(url).await else {
        return 0;
    };
    diesel::sql_query(sql)
        .get_result::<N>(&mut conn)
        .await
        .map_or(0, |row| row.n)
}
