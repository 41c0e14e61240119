"""The RL pipeline on the reference GPT: samplers, a reward stage and a learner, joined by a rendezvous directory."""
