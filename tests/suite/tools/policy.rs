//! Policy tags and refusals, workspace confinement (`..`, symlinks, absolute paths), and the registry.

use std::sync::Arc;

use agentd::tools::bash::BashTool;
use agentd::tools::policy::{resolve_path, Policy};
use agentd::tools::read::ReadTool;
use agentd::tools::registry::{RegistryError, ToolRegistry};
use agentd::tools::tool::{PolicyTag, Tool, ToolContext, ToolError};
use agentd::tools::write::WriteTool;
use serde_json::json;

use super::{err, ok, put};

#[test]
fn policies_parse_and_name_themselves() {
    let all: Policy = "read_only,write,exec,network".parse().unwrap();
    assert_eq!(all, Policy::all());
    assert_eq!(all.name(), "read_only,write,exec,network");
    let some: Policy = " exec , read_only ".parse().unwrap();
    assert_eq!(some.name(), "read_only,exec");
    assert_eq!("".parse::<Policy>().unwrap(), Policy::none());
    assert_eq!("all".parse::<Policy>().unwrap(), Policy::all());
    let bad = "read_only,root".parse::<Policy>().unwrap_err();
    assert_eq!(bad.tag, "root");
    assert!(bad.to_string().contains("unknown policy tag 'root'"));
    assert_eq!(
        serde_json::to_value(PolicyTag::ReadOnly).unwrap(),
        json!("read_only")
    );
}

#[test]
fn a_tool_outside_the_policy_is_refused_naming_the_policy() {
    let policy: Policy = "read_only,write".parse().unwrap();
    assert_eq!(policy.check(&ReadTool::new()), Ok(()));
    assert_eq!(policy.check(&WriteTool::new()), Ok(()));
    let refusal = policy.check(&BashTool::new()).unwrap_err();
    assert_eq!(
        refusal,
        "Tool 'bash' is not allowed by policy 'read_only,write': it needs the 'exec' tag, which the policy does not allow."
    );
    assert!(Policy::read_only()
        .check(&WriteTool::new())
        .unwrap_err()
        .contains("policy 'read_only'"));
}

/// A workspace `ws` inside a temp dir, with `outside/secret.txt` next to it.
fn workspace() -> (tempfile::TempDir, std::path::PathBuf, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    put(dir.path(), "outside/secret.txt", "secret\n");
    put(&ws, "inside.txt", "inside\n");
    let c = ToolContext::new(&ws).with_workspace(&ws);
    (dir, ws, c)
}

#[tokio::test]
async fn confinement_blocks_parent_escapes_and_absolute_paths() {
    let (dir, ws, c) = workspace();
    let read = ReadTool::new();
    assert_eq!(
        ok(&read, json!({"path": "inside.txt"}), &c).await.content,
        "inside\n"
    );
    let escape = err(&read, json!({"path": "../outside/secret.txt"}), &c).await;
    assert!(escape.contains("outside the workspace"), "{escape}");
    let absolute = dir.path().join("outside/secret.txt");
    let text = err(&read, json!({"path": absolute.to_str().unwrap()}), &c).await;
    assert!(text.contains("outside the workspace"), "{text}");
    // Through a directory that does not exist yet.
    let text = err(
        &WriteTool::new(),
        json!({"path": "new/../../x.txt", "content": "x"}),
        &c,
    )
    .await;
    assert!(text.contains("outside the workspace"), "{text}");
    assert!(!dir.path().join("x.txt").exists());
    // New nested paths inside are fine.
    ok(
        &WriteTool::new(),
        json!({"path": "new/deeper/x.txt", "content": "x"}),
        &c,
    )
    .await;
    assert!(ws.join("new/deeper/x.txt").exists());
}

#[tokio::test]
async fn confinement_follows_symlinks() {
    let (dir, ws, c) = workspace();
    std::os::unix::fs::symlink(dir.path().join("outside"), ws.join("link")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside/new.txt"), ws.join("dangling")).unwrap();
    std::os::unix::fs::symlink("inside.txt", ws.join("alias")).unwrap();

    let text = err(&ReadTool::new(), json!({"path": "link/secret.txt"}), &c).await;
    assert!(text.contains("outside the workspace"), "{text}");
    // A dangling link whose target is outside: writing through it would create the file outside.
    let text = err(
        &WriteTool::new(),
        json!({"path": "dangling", "content": "x"}),
        &c,
    )
    .await;
    assert!(text.contains("outside the workspace"), "{text}");
    assert!(!dir.path().join("outside/new.txt").exists());
    // A link that stays inside is fine.
    assert_eq!(
        ok(&ReadTool::new(), json!({"path": "alias"}), &c)
            .await
            .content,
        "inside\n"
    );
}

#[test]
fn paths_resolve_against_cwd_and_home() {
    let (_dir, ws, c) = workspace();
    let ws = std::fs::canonicalize(ws).unwrap();
    assert_eq!(
        resolve_path(&c, "a/./b/../c.txt").unwrap(),
        ws.join("a/c.txt")
    );
    assert_eq!(resolve_path(&c, ".").unwrap(), ws);
    let free = ToolContext::new("/");
    if let Some(home) = std::env::var_os("HOME") {
        let home = std::fs::canonicalize(home).unwrap();
        assert_eq!(resolve_path(&free, "~").unwrap(), home);
        assert_eq!(resolve_path(&free, "~/x.txt").unwrap(), home.join("x.txt"));
    }
    assert!(matches!(
        resolve_path(&free, ""),
        Err(ToolError::RespondToModel(_))
    ));
}

#[test]
fn the_registry_builds_the_coding_set_and_rejects_duplicates_and_unknown_names() {
    let coding = ToolRegistry::coding();
    assert_eq!(
        coding.names(),
        ["read", "write", "edit", "bash", "ls", "find", "grep"]
    );
    for spec in coding.specs() {
        assert_eq!(
            spec.validate().map_err(|e| e.to_string()),
            Ok(()),
            "{}",
            spec.name
        );
        assert!(!spec.description.is_empty());
    }
    // Doc comments become the descriptions the model sees.
    let read = coding.get("read").unwrap();
    let path_doc = read.spec().parameters["properties"]["path"]["description"]
        .as_str()
        .unwrap();
    assert!(
        path_doc.starts_with("Path of the file to read"),
        "{path_doc}"
    );
    assert_eq!(read.spec().parameters["required"], json!(["path"]));
    assert_eq!(coding.get("bash").unwrap().tags(), [PolicyTag::Exec]);
    let edit = &coding.get("edit").unwrap().spec().parameters;
    let item = &edit["properties"]["edits"]["items"];
    assert_eq!(item["required"], json!(["old_text", "new_text"]), "{edit}");
    assert!(item["properties"]["old_text"]["description"]
        .as_str()
        .unwrap()
        .contains("exactly once"));
    let bash = &coding.get("bash").unwrap().spec().parameters;
    assert_eq!(
        bash["properties"]["timeout"]["type"],
        json!(["number", "null"]),
        "{bash}"
    );
    assert!(
        !bash.to_string().contains("\"format\""),
        "numeric formats are stripped: {bash}"
    );

    let two = ToolRegistry::builtin(&["grep", "read"]).unwrap();
    assert_eq!(two.names(), ["grep", "read"]);
    let unknown = ToolRegistry::builtin(&["read", "browse"]).unwrap_err();
    assert!(matches!(&unknown, RegistryError::Unknown { name, .. } if name == "browse"));
    assert_eq!(
        unknown.to_string(),
        "unknown tool 'browse' (known tools: read, write, edit, bash, ls, find, grep)"
    );
    assert_eq!(
        ToolRegistry::builtin(&["read", "read"]).unwrap_err(),
        RegistryError::Duplicate("read".into())
    );
    let mut registry = ToolRegistry::new();
    registry.register(Arc::new(ReadTool::new())).unwrap();
    assert!(registry.register(Arc::new(ReadTool::new())).is_err());
    assert_eq!(registry.len(), 1);
}

#[tokio::test]
async fn arguments_that_do_not_match_the_schema_are_reported() {
    let read = ReadTool::new();
    let errors = read
        .spec()
        .validate_arguments(&json!({"path": 3}))
        .unwrap_err();
    assert!(errors.iter().any(|e| e.starts_with("/path")), "{errors:?}");
    assert!(read
        .spec()
        .validate_arguments(&json!({"path": "a", "offset": 2}))
        .is_ok());
}

#[tokio::test]
async fn malformed_arguments_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let c = ToolContext::new(dir.path());
    let inputs = [
        json!(null),
        json!([]),
        json!("read"),
        json!({}),
        json!({"path": 5, "command": false, "pattern": [], "edits": "x"}),
        json!({"path": "a\0b", "content": "x", "edits": [], "command": "", "pattern": "x"}),
    ];
    for tool in ToolRegistry::coding().iter() {
        for args in &inputs {
            match tool.call(args.clone(), &c).await {
                Err(ToolError::RespondToModel(_)) | Ok(_) => {}
                Err(e) => panic!("{} {args}: {e:?}", tool.spec().name),
            }
        }
    }
}
