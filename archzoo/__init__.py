"""archzoo: a zoo of parallel actor-learner architectures for deep RL."""
__version__ = "0.1.0"
