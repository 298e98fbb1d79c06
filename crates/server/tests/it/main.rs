//! Integration tests of the `nereid` binary's command line.

mod flags;
