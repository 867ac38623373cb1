//! Scenario tests with a hand-driven clock.
