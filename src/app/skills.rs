//! Skills (Pi's and the Agent Skills format): a directory with a `SKILL.md` whose front matter has `name` and
//! `description`. Only the list (name, description, file) goes into the system prompt; the model reads a
//! skill's file with the `read` tool when a task matches.
//!
//! Looked for in `<config dir>/skills/` (user) and `<cwd>/.agentd/skills/` (project), recursively (a
//! `SKILL.md` in any subdirectory, at most 4 levels deep). A skill without a description is skipped with a
//! warning; the first of two skills with the same name wins.

use std::path::{Path, PathBuf};

use super::lookup::LookupDir;
use crate::tools::policy::FileScope;

/// The largest `SKILL.md` read.
const MAX_SKILL_BYTES: u64 = 1024 * 1024;

/// How deep below a skills directory a `SKILL.md` is looked for.
const MAX_DEPTH: usize = 4;

/// One discovered skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The `SKILL.md` file.
    pub path: PathBuf,
}

/// The skills under `dirs` (in order), with warnings about files that could not be used.
pub fn discover(dirs: &[LookupDir]) -> (Vec<Skill>, Vec<String>) {
    let mut skills: Vec<Skill> = Vec::new();
    let mut warnings = Vec::new();
    for dir in dirs {
        let mut files = Vec::new();
        collect(dir, 0, &mut files);
        files.sort();
        for file in files {
            match load(&dir.scope, &file) {
                Ok(skill) => {
                    if skills.iter().any(|s| s.name == skill.name) {
                        warnings.push(format!(
                            "skill `{}` in {} ignored: a skill of that name was found first",
                            skill.name,
                            file.display()
                        ));
                    } else {
                        skills.push(skill);
                    }
                }
                Err(w) => warnings.push(format!("skill {} skipped: {w}", file.display())),
            }
        }
    }
    (skills, warnings)
}

fn collect(dir: &LookupDir, depth: usize, out: &mut Vec<PathBuf>) {
    for path in dir.entries() {
        let Some(name) = path.file_name() else {
            continue;
        };
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if dir.scope.is_dir(&path) {
            if depth < MAX_DEPTH {
                collect(&LookupDir::within(&dir.scope, &path), depth + 1, out);
            }
        } else if depth > 0 && name == "SKILL.md" {
            out.push(path);
        }
    }
}

/// Reads one `SKILL.md` within `scope`. The name defaults to the directory's name.
fn load(scope: &FileScope, path: &Path) -> Result<Skill, String> {
    let text = scope
        .read_bytes(path, MAX_SKILL_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|b| String::from_utf8(b).map_err(|_| "not UTF-8 text".to_string()))?;
    let fields = front_matter(&text).ok_or("no front matter (--- name/description ---)")?;
    let get = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let description = get("description").ok_or("the front matter has no description")?;
    let name = get("name")
        .or_else(|| {
            path.parent()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
        })
        .ok_or("the skill has no name")?;
    Ok(Skill {
        name,
        description,
        path: path.to_path_buf(),
    })
}

/// The `key: value` pairs of a leading `---` block: plain, quoted, and `|` / `>` block values (their
/// indented lines joined with spaces).
pub fn front_matter(text: &str) -> Option<Vec<(String, String)>> {
    let mut lines = text.lines();
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut block: Option<usize> = None;
    for line in lines {
        if line.trim_end() == "---" {
            return Some(fields);
        }
        let indented = line.starts_with(' ') || line.starts_with('\t');
        if let (Some(i), true) = (block, indented) {
            let value = &mut fields[i].1;
            if !value.is_empty() {
                value.push(' ');
            }
            value.push_str(line.trim());
            continue;
        }
        block = None;
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let value = match value {
            "|" | ">" | "|-" | ">-" => {
                block = Some(fields.len());
                String::new()
            }
            v if v.len() >= 2
                && ((v.starts_with('"') && v.ends_with('"'))
                    || (v.starts_with('\'') && v.ends_with('\''))) =>
            {
                v[1..v.len() - 1].to_string()
            }
            v => v.to_string(),
        };
        fields.push((key.trim().to_string(), value));
    }
    None
}

fn escape_xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The system prompt's skills section (empty when there are none).
pub fn prompt_section(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "Skills: when a task matches a skill's description, read its file with the read tool first and \
         follow it (relative paths in it are relative to its directory).\n<available_skills>\n",
    );
    for skill in skills {
        s.push_str(&format!(
            "<skill><name>{}</name><description>{}</description><location>{}</location></skill>\n",
            escape_xml(&skill.name),
            escape_xml(&skill.description),
            escape_xml(&skill.path.display().to_string())
        ));
    }
    s.push_str("</available_skills>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_values() {
        let f = front_matter(
            "---\nname: pdf-tools\ndescription: \"Extract text: fast\"\nother: >\n  line one\n  line two\n---\n# body",
        )
        .unwrap();
        assert_eq!(
            f,
            vec![
                ("name".to_string(), "pdf-tools".to_string()),
                ("description".to_string(), "Extract text: fast".to_string()),
                ("other".to_string(), "line one line two".to_string()),
            ]
        );
        assert_eq!(front_matter("# no front matter"), None);
        assert_eq!(front_matter("---\nname: x\n"), None);
    }

    #[test]
    fn discovery_names_dedupes_and_warns() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user");
        let project = dir.path().join("project");
        for (root, name, body) in [
            (
                &user,
                "alpha",
                "---\nname: alpha\ndescription: First.\n---\n",
            ),
            (&user, "beta", "---\ndescription: Named by its dir.\n---\n"),
            (&user, "broken", "---\nname: broken\n---\n"),
            (
                &project,
                "alpha",
                "---\nname: alpha\ndescription: Dup.\n---\n",
            ),
        ] {
            std::fs::create_dir_all(root.join(name)).unwrap();
            std::fs::write(root.join(name).join("SKILL.md"), body).unwrap();
        }
        let dirs = [LookupDir::user(&user), LookupDir::user(&project)];
        let (skills, warnings) = discover(&dirs);
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["alpha", "beta"]);
        assert_eq!(skills[0].description, "First.");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        let section = prompt_section(&skills);
        assert!(section.contains("<name>beta</name><description>Named by its dir.</description>"));
    }

    #[test]
    fn a_confined_project_takes_no_skill_from_outside_its_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("leak")).unwrap();
        std::fs::write(
            outside.join("leak").join("SKILL.md"),
            "---\nname: leak\ndescription: The outside secret.\n---\n",
        )
        .unwrap();
        let ws = dir.path().join("ws");
        let skills = ws.join(".agentd").join("skills");
        std::fs::create_dir_all(skills.join("own")).unwrap();
        std::fs::write(
            skills.join("own").join("SKILL.md"),
            "---\nname: own\ndescription: Inside.\n---\n",
        )
        .unwrap();
        // A linked skill directory, and a linked SKILL.md in a real one.
        std::os::unix::fs::symlink(outside.join("leak"), skills.join("linked")).unwrap();
        std::fs::create_dir_all(skills.join("file")).unwrap();
        std::os::unix::fs::symlink(outside.join("leak/SKILL.md"), skills.join("file/SKILL.md"))
            .unwrap();
        let scope = FileScope::within(&ws);
        let (found, warnings) = discover(&[LookupDir::project(&scope, ".agentd/skills")]);
        let names: Vec<&str> = found.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["own"]);
        assert!(
            warnings.iter().all(|w| !w.contains("outside secret")),
            "{warnings:?}"
        );
        // Unconfined, the links are followed.
        let (found, _) = discover(&[LookupDir::project(
            &FileScope::unconfined(&ws),
            ".agentd/skills",
        )]);
        assert_eq!(found.len(), 2, "{found:?}");
    }
}
