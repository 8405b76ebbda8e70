"""The composition root: where the generic machinery (controller/) meets the TFJob logic
(reconcile/). Neither of those packages imports this one, so every arrow points down."""
