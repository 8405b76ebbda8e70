"""Training progress: what the training processes report about themselves
(docs/progress.md). The wire format read strictly (``wire``), who reported, from the
pod a token was bound to (``identity``), what is kept of one replica's reports
(``records``), and the job's ``trainingProgress`` summarised from them (``summary``);
and what the controller does with them (docs/stalls.md): the progress deadline and the
Stalled condition (``stall``), the restart guard (``guard``). Pure functions over
values; the intake that receives reports and the store that keeps them are the sync
layer's (reconcile.sync.progress). Imports api/ and policy/ (conditions).
"""
