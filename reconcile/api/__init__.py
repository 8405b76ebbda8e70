"""What a TFJob is: the API's vocabulary, models, status types, defaulting,
validation, the admission schema, labels, quantities and the parsed spec. Imports
nothing else of reconcile/.
"""
