"""The one place the lab builds Trainer arguments: what a spec sets lands as set, and ``extra`` can neither override a
spec field nor carry a typo into transformers."""

import pytest

from st_magnitude.lab.engine.training import TrainSpec, trainer_arguments


def _spec(tmp_path, **extra):
    return TrainSpec(output_dir=str(tmp_path), steps=7, batch_size=4, learning_rate=3e-5, seed=11, extra=extra)


def test_spec_fields_and_extra_arguments_reach_the_trainer(tmp_path):
    args = trainer_arguments(_spec(tmp_path, gradient_accumulation_steps=2))
    assert (args.max_steps, args.per_device_train_batch_size, args.learning_rate, args.seed) == (7, 4, 3e-5, 11)
    assert args.gradient_accumulation_steps == 2


def test_extra_cannot_override_what_the_spec_sets(tmp_path):
    with pytest.raises(ValueError, match=r"extra sets max_steps, seed, which the spec itself sets"):
        trainer_arguments(_spec(tmp_path, seed=3, max_steps=2))


def test_a_typo_in_extra_is_named_with_the_allowed_values(tmp_path):
    with pytest.raises(ValueError, match=r"gradient_acumulation_steps, which is no argument of .*allowed: its fields"):
        trainer_arguments(_spec(tmp_path, gradient_acumulation_steps=2))
