"""``python -m tfjob_controller``: the same entry point as the ``tfjob-controller`` script."""

from tfjob_controller.launch import main

main()
