//! The README, run as a user runs it: `cargo xtask dev` in the background (the same command,
//! objects and `config/dev.yaml`), the commands of the README's walk-through block one by one
//! through `sh`, what they should have done checked against the cluster, then Ctrl-C and no
//! process left behind.
//!
//! Also: every shell block of README.md and config/examples/README.md is either run by a test
//! or says why it cannot run here.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// poolkeeper's admin server in `config/dev.yaml`.
const DEV_HEALTH: &str = "127.0.0.1:8081";
/// A fresh machine builds poolkeeper and its runner first.
const DEV_READY_TIMEOUT: Duration = Duration::from_secs(15 * 60);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
const WALKTHROUGH_MARKER: &str = "<!-- walkthrough: run by xtask/tests/walkthrough.rs -->";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_owned()
}

fn target() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => root().join(dir),
        None => root().join("target"),
    }
}

/// The directory holding kubectl: the one `cargo xtask test` exports, else the dev cache.
fn control_plane_dir() -> PathBuf {
    if let Some(dir) =
        std::env::var_os(poolkeeper_gomod::POOLKEEPER_CONTROL_PLANE).filter(|d| !d.is_empty())
    {
        return PathBuf::from(dir);
    }
    let go_mod = std::fs::read_to_string(root().join("xtask/controlplane/kubernetes/go.mod"))
        .expect("the control plane's go.mod");
    let version = poolkeeper_gomod::required_version(&go_mod, "k8s.io/kubernetes")
        .expect("k8s.io/kubernetes is pinned");
    target().join("control-plane").join(version)
}

/// `cargo xtask dev`, running; stopped (Ctrl-C) and reaped on drop if the test did not.
struct Dev {
    child: Child,
    log: PathBuf,
}

impl Dev {
    fn start() -> Dev {
        let log = target().join("walkthrough").join("dev.log");
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(target().join("dev").join("kubeconfig"));
        let out = std::fs::File::create(&log).unwrap();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let child = Command::new(cargo)
            .args(["xtask", "dev"])
            .current_dir(root())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting cargo xtask dev");
        Dev { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn fail(&self, what: &str) -> ! {
        panic!("{what}\n--- cargo xtask dev ---\n{}", self.log())
    }

    /// Until poolkeeper's `/readyz` answers 200, failing at once when the command exits.
    fn wait_until_ready(&mut self) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.fail(&format!(
                    "cargo xtask dev exited before it was ready ({status})"
                ));
            }
            if self.log().contains("export KUBECONFIG=") && http_status("/readyz") == Some(200) {
                return;
            }
            if started.elapsed() > DEV_READY_TIMEOUT {
                self.fail("poolkeeper's /readyz was not 200 in time");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Ctrl-C, as a terminal sends it to the foreground process (cargo execs xtask, which
    /// execs the runner, so this pid is the runner).
    fn interrupt(&mut self) -> std::process::ExitStatus {
        signal("INT", self.child.id());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if started.elapsed() > STOP_TIMEOUT {
                self.fail("cargo xtask dev did not stop within a minute of Ctrl-C");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            signal("INT", self.child.id());
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline && self.child.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn signal(name: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status();
}

/// Every process below `pid`, read from /proc (children of each of its threads).
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The status code of a plain HTTP GET to poolkeeper's admin server.
fn http_status(path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(DEV_HEALTH).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// One command of a README block, with the output the README shows under it (`# ` lines).
#[derive(Debug, PartialEq)]
struct Step {
    command: String,
    shown: Vec<String>,
}

impl Step {
    /// The README shows an error under a command that fails.
    fn expects_failure(&self) -> bool {
        self.shown
            .first()
            .is_some_and(|line| line.starts_with("Error"))
    }
}

/// The ```sh blocks of a Markdown text, each with the HTML comment line just above it.
fn shell_blocks(markdown: &str) -> Vec<(Option<String>, String)> {
    let mut blocks = Vec::new();
    let mut previous: Option<&str> = None;
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh" {
            let marker = previous
                .filter(|p| p.trim_start().starts_with("<!--"))
                .map(|p| p.trim().to_owned());
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push((marker, body.join("\n")));
        }
        if !line.trim().is_empty() {
            previous = Some(line);
        }
    }
    blocks
}

/// Commands and the output shown under each: the comment lines right below a command; a
/// comment after a blank line (or before any command) is prose.
fn steps(block: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut after_command = false;
    for line in block.lines().map(str::trim) {
        match (line.strip_prefix('#'), steps.last_mut()) {
            _ if line.is_empty() => after_command = false,
            (Some(shown), Some(step)) if after_command => step.shown.push(shown.trim().to_owned()),
            (Some(_), _) => {}
            (None, _) => {
                steps.push(Step {
                    command: line.to_owned(),
                    shown: Vec::new(),
                });
                after_command = true;
            }
        }
    }
    steps
}

fn run_step(step: &Step, path: &str) -> Output {
    let output = Command::new("sh")
        .args(["-c", &step.command])
        .current_dir(root())
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .expect("running sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        !output.status.success(),
        step.expects_failure(),
        "`{}` ({}):\n{text}",
        step.command,
        output.status
    );
    if step.expects_failure() {
        // What the README shows of the error is what the user gets, up to its "...".
        let shown = step.shown.join(" ");
        let shown = shown.trim_end_matches("...").trim_end();
        assert!(
            text.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .contains(shown),
            "`{}` printed\n{text}\nbut the README shows\n{shown}",
            step.command
        );
    }
    output
}

/// `kubectl` as the README's block sets it up, for the checks between the steps.
fn kubectl(path: &str, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(args)
        .current_dir(root())
        .env("PATH", path)
        .env("KUBECONFIG", target().join("dev").join("kubeconfig"))
        .output()
        .expect("running kubectl");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn readme_walkthrough() -> Vec<Step> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks = shell_blocks(&readme);
    let (_, block) = blocks
        .iter()
        .find(|(marker, _)| marker.as_deref() == Some(WALKTHROUGH_MARKER))
        .expect("README.md has a walk-through block");
    steps(block)
}

#[test]
fn the_readme_walkthrough_works_against_cargo_xtask_dev() {
    let steps = readme_walkthrough();
    let path = format!(
        "{}:{}",
        control_plane_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut dev = Dev::start();
    dev.wait_until_ready();

    // The block, in order. It exports KUBECONFIG in its first line; each step runs in its own
    // shell, so that line is carried into the next ones.
    let (export, rest) = steps.split_first().expect("the block has commands");
    assert!(
        export.command.starts_with("export KUBECONFIG="),
        "{export:?}"
    );
    for step in rest {
        let with_env = Step {
            command: format!("{}; {}", export.command, step.command),
            shown: step.shown.clone(),
        };
        run_step(&with_env, &path);
        check_effect(&step.command, &path);
    }
    let joined: Vec<&str> = rest.iter().map(|s| s.command.as_str()).collect();
    for needed in [
        "kubectl -n shop-hangzhou run web",
        "create deployment",
        "deployment-outside.yaml",
        "daemonset-agent.yaml",
        "label namespace team-a",
        "explain",
        "audit",
    ] {
        assert!(
            joined.iter().any(|c| c.contains(needed)),
            "the walk-through no longer runs {needed:?}: {joined:?}"
        );
    }

    let pid = dev.child.id();
    let below = descendants(pid);
    assert!(
        below.len() >= 5,
        "control plane and controller below the runner: {below:?}"
    );
    let status = dev.interrupt();
    assert!(status.success(), "Ctrl-C: {status}\n{}", dev.log());
    let left: Vec<u32> = below.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "processes left after Ctrl-C: {left:?}");
    assert!(dev.log().contains("control plane stopped"), "{}", dev.log());
}

/// What the README says a step does, checked in the cluster.
fn check_effect(command: &str, path: &str) {
    if command.contains("run web ") {
        let placed = eventually("pod web scheduled", Duration::from_secs(60), || {
            let node = kubectl(
                path,
                &[
                    "-n",
                    "shop-hangzhou",
                    "get",
                    "pod",
                    "web",
                    "-o",
                    "jsonpath={.spec.nodeName}",
                ],
            );
            (!node.is_empty()).then_some(node)
        });
        assert_eq!(pool_of(path, &placed), "hangzhou", "web runs on {placed}");
        let pod = kubectl(
            path,
            &["-n", "shop-hangzhou", "get", "pod", "web", "-o", "json"],
        );
        let compact: String = pod.split_whitespace().collect();
        assert!(
            compact.contains(
                r#""key":"apps.openyurt.io/nodepool","operator":"In","values":["hangzhou"]"#
            ),
            "no pool affinity: {pod}"
        );
        assert!(
            compact.contains(r#""key":"node-role.kubernetes.io/edge""#),
            "no edge toleration: {pod}"
        );
    }
    if command.contains("daemonset-agent.yaml") {
        daemonset_on_its_pool(path);
    }
    if command.contains("label namespace team-a") {
        // The label reaches the index and the webhook selectors within moments: what a
        // person typing the next line never notices, this run waits for.
        eventually(
            "team-a placed by its label",
            Duration::from_secs(30),
            || {
                let probe = kubectl(
                    path,
                    &[
                        "-n",
                        "team-a",
                        "run",
                        "probe",
                        "--image=nginx",
                        "--dry-run=server",
                        "-o",
                        "jsonpath={.spec.affinity.nodeAffinity}",
                    ],
                );
                probe.contains("cloud").then_some(())
            },
        );
    }
    if command.contains("-n team-a run api") {
        let node = eventually("pod api scheduled", Duration::from_secs(60), || {
            let node = kubectl(
                path,
                &[
                    "-n",
                    "team-a",
                    "get",
                    "pod",
                    "api",
                    "-o",
                    "jsonpath={.spec.nodeName}",
                ],
            );
            (!node.is_empty()).then_some(node)
        });
        assert_eq!(pool_of(path, &node), "cloud", "api runs on {node}");
    }
    if command.contains("create deployment shop") {
        let nodes = eventually(
            "3 pods of deployment shop scheduled",
            Duration::from_secs(90),
            || Some(bound_nodes(path, "app=shop")).filter(|nodes| nodes.len() == 3),
        );
        for node in &nodes {
            assert_eq!(
                pool_of(path, node),
                "hangzhou",
                "a pod of shop runs on {node}"
            );
        }
    }
}

/// The nodes the Pods of `shop-hangzhou` with `selector` are bound to.
fn bound_nodes(path: &str, selector: &str) -> Vec<String> {
    let nodes = kubectl(
        path,
        &[
            "-n",
            "shop-hangzhou",
            "get",
            "pods",
            "-l",
            selector,
            "-o",
            "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
        ],
    );
    nodes
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn daemonset_on_its_pool(path: &str) {
    let nodes = eventually("the DaemonSet's Pod", Duration::from_secs(60), || {
        Some(bound_nodes(path, "app=agent")).filter(|nodes| !nodes.is_empty())
    });
    // One Node in the pool: exactly one Pod, on it, and none tried elsewhere.
    assert_eq!(nodes, ["edge-hz-1"]);
    let events = kubectl(
        path,
        &[
            "-n",
            "shop-hangzhou",
            "get",
            "events",
            "-o",
            "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
        ],
    );
    assert!(!events.contains("FailedCreate"), "{events}");
}

fn pool_of(path: &str, node: &str) -> String {
    kubectl(
        path,
        &[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.metadata.labels.apps\\.openyurt\\.io/nodepool}",
        ],
    )
}

/// Every shell block of the READMEs a user reads first says whether a test runs it.
#[test]
fn every_readme_shell_block_is_run_or_says_why_not() {
    for file in ["README.md", "config/examples/README.md"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        for (marker, block) in shell_blocks(&text) {
            let Some(marker) = marker else {
                panic!(
                    "{file}: a ```sh block has no `<!-- run by: ... -->` or `<!-- not run: ... -->` line above it:\n{block}"
                );
            };
            if marker == WALKTHROUGH_MARKER {
                continue;
            }
            if let Some(reason) = marker.strip_prefix("<!-- not run:") {
                assert!(
                    reason.trim_end_matches("-->").trim().len() > 10,
                    "{file}: say why: {marker}"
                );
                continue;
            }
            let Some(tests) = marker.strip_prefix("<!-- run by:") else {
                panic!("{file}: unknown marker {marker}");
            };
            for test in tests.trim_end_matches("-->").split(',').map(str::trim) {
                assert!(
                    root().join(test).is_file(),
                    "{file}: {marker}: no file {test}"
                );
            }
        }
    }
}

#[test]
fn readme_blocks_split_into_commands_and_shown_output() {
    let markdown = "text\n<!-- run by: a.rs -->\n```sh\n# prose\ncmd one\n# Error from server: no ...\n\n# more prose\ncmd two\n```\n```sh\nbare\n```\n";
    let blocks = shell_blocks(markdown);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].0.as_deref(), Some("<!-- run by: a.rs -->"));
    assert_eq!(blocks[1].0, None);
    let parsed = steps(&blocks[0].1);
    assert_eq!(
        parsed,
        [
            Step {
                command: "cmd one".into(),
                shown: vec!["Error from server: no ...".into()],
            },
            Step {
                command: "cmd two".into(),
                shown: vec![],
            },
        ]
    );
    assert!(parsed[0].expects_failure());
    assert!(!parsed[1].expects_failure());
}
