"""MagicBeanStalk, one module per stage (paper section 3): traces, decompose (+ effectivity), leaves,
compose, reground, calibrate, with finmbs's novelty guard and quality control; `pipeline.grow_seed`
takes one seed through them, `direct` is the direct-synthesis baseline (appendix C), `stages` declares
the stages' names and order. The run loop around a seed is the run layer's (`finmbs.runs`)."""
