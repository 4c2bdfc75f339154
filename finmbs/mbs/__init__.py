"""MagicBeanStalk, one module per stage (paper section 3): traces, decompose (+ effectivity),
leaves, compose, calibrate; `pipeline` runs them per seed."""
