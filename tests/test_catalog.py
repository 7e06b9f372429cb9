"""qalib.notebook.catalog is the one registry of notebooks: each entry names its notebook, and its code is the package
named after it (compute, experiment and demos modules)."""

import importlib.util
from pathlib import Path

from qalib.notebook.catalog import CATALOG, demo_factories

TOPICS = Path(__file__).resolve().parent.parent / "qalib" / "topics"


def test_every_entry_names_a_notebook_a_topic_an_experiment_and_demos_that_exist():
    for entry in CATALOG:
        assert entry.path.is_file(), f"{entry.file} does not exist"
        assert entry.package == "qalib.topics.nb" + entry.path.stem
        for module in (entry.topic, entry.experiment, entry.demos):
            assert importlib.util.find_spec(module) is not None, f"{entry.file}: no module {module}"


def test_every_module_in_qalib_topics_is_named_by_exactly_one_entry():
    named = [m for entry in CATALOG for m in (entry.topic, entry.experiment, entry.demos)]
    modules = sorted(f"qalib.topics.{p.parent.name}.{p.stem}" for p in TOPICS.glob("nb*/*.py") if p.stem != "__init__")
    assert sorted(named) == modules


def test_demo_factories_collect_the_demos_of_every_entry():
    from qalib.topics.nb07_multi_head import demos

    factories = demo_factories()
    assert list(factories) == [entry.file.removesuffix(".ipynb") for entry in CATALOG]
    assert all(factories.values()), "every notebook has at least one demo"
    assert factories["07_multi_head"] == demos.DEMOS
