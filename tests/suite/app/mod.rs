//! The app layer: the coding harness (loop rules, file blocks, second choice, self-check) and its doors (`agentd
//! run` and the HTTP sessions API), confined to a workspace.

#[cfg(feature = "local")]
mod blocks_grammar;
mod confinement;
mod doors;
mod edit_format;
mod loop_rules;
mod second_choice;
mod self_check;

use std::path::Path;
use std::sync::Arc;

use agentd::agent::{AgentEndReason, AgentEvent, AgentLoopConfig};
use agentd::app::harness::{self, EditFormat, Harness, HarnessSetup, Profile, RuleId};
use agentd::tools::policy::FileScope;
use agentd::tools::support::workspace::WorkspaceState;
use agentd::tools::tool::Tool;

/// Puts a harness with `profile` less `off`, in `format`, around `config` for a session in `dir` with `tools`,
/// its prompt `task` naming `named` (path, text).
pub(crate) fn install_harness(
    config: &mut AgentLoopConfig,
    dir: &Path,
    tools: &[Arc<dyn Tool>],
    profile: Profile,
    format: EditFormat,
    off: &[RuleId],
    (task, named): (&str, &[(String, String)]),
) -> Arc<Harness> {
    let h = Harness::new(HarnessSetup {
        profile: profile.without(off),
        format,
        scope: FileScope::unconfined(dir),
        state: config.workspace_state.clone(),
        tools: harness::mutating_tools(tools),
        commands: None,
        blocks_grammar: false,
        trace: None,
    });
    h.start_prompt(task, named, String::new());
    config.harness = Some(h.clone());
    h
}

/// [`install_harness`] for a blocks session with the workspace state `state`.
pub(crate) fn blocks_harness(
    config: &mut AgentLoopConfig,
    dir: &Path,
    state: WorkspaceState,
    tools: &[Arc<dyn Tool>],
    off: &[RuleId],
    prompt: (&str, &[(String, String)]),
) -> Arc<Harness> {
    config.workspace_state = Some(state);
    install_harness(
        config,
        dir,
        tools,
        Profile::small(),
        EditFormat::Blocks,
        off,
        prompt,
    )
}

/// How a run ended (its last event), with the reason's text.
pub(crate) fn ending(events: &[AgentEvent]) -> (AgentEndReason, Option<String>) {
    match events.last() {
        Some(AgentEvent::AgentEnd { reason, error, .. }) => (*reason, error.clone()),
        other => panic!("not agent_end: {other:?}"),
    }
}
