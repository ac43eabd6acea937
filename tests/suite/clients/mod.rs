//! The clients layer: the settings `agentd clients` prints for each coding client.

mod command;
