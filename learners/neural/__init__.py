r"""Neural Lagrangian/Hamiltonian baselines and the training and rollout shared with ModLaNet.

Modules: :mod:`~learners.neural.baselines` (LNN, HNN, MLP baselines), :mod:`~learners.neural.training`
(the training loop), :mod:`~learners.neural.losses` (acceleration and DEL losses), :mod:`~learners.neural.prediction`
(prediction of position-trained models),
:mod:`~learners.neural.rollout` (rollouts), :mod:`~learners.neural.metrics` (the paper's prediction metrics),
:mod:`~learners.neural.energy` (the true energy, velocities from momenta), :mod:`~learners.neural.initial_states`
(the paper's random initial states).
"""
