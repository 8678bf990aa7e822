"""Trainer-side hook: `Reporter` writes a rank's metrics and events to the run's spool.

Importable without the agent daemon running and without torch; adapters for Lightning
(`agent.hook.lightning`) and Hugging Face Transformers (`agent.hook.hf`) import their
framework only when used.
"""

from agent.hook.reporter import PHASES, Reporter, resume_checkpoint
from agent.wire.checkpoints import RESUME_ENV
from agent.wire.checkpoints import mark_complete as mark_checkpoint_complete

__all__ = ["PHASES", "RESUME_ENV", "Reporter", "mark_checkpoint_complete", "resume_checkpoint"]
