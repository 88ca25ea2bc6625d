"""RLlib 2.60's unit tests, run on cairn (issue 38); see docs/rllib_parity.md for the list and what fails."""
