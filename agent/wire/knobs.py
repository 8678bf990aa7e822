"""The control knobs with a fixed meaning to the hook (agent.hook.control) and the
cockpit (cockpit.analysis.markers): a one-shot knob asks the trainer for one action and
is done once acknowledged; every other knob lasts until set again."""

ONE_SHOT_KNOBS = ("checkpoint_now", "eval_now")
