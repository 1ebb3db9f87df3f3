"""Plug-ins that put divclip's losses into other trainers. Import the one you need; each imports its framework:

trainer.integrations.verl   registers `atr_kl3` and `divclip_<measure>` with verl's register_policy_loss
trainer.integrations.trl    DivClipGRPOConfig / DivClipGRPOTrainer for TRL's GRPOTrainer
"""
