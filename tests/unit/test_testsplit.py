"""The aging benchmark's test split stays honest: none of its labels is one the retrieval lexicon
lists, or one the dev split uses; every kind is asked in both of its languages."""

from projections.text import fold
from services.query.retrieval.lexicon import CONCEPTS
from tests.benchmarks.aging import personas, testsplit


def test_no_label_of_the_test_split_is_a_label_of_the_lexicon_or_of_the_dev_split() -> None:
    lexicon = {fold(label) for concept in CONCEPTS for label in concept.labels}
    dev = {fold(label) for kind in personas.KINDS.values() for labels in kind.labels.values()
           for label in labels}
    labels = {fold(label) for kind in testsplit.KINDS.values() for labels in kind.labels.values()
              for label in labels}
    assert len(labels) > 60
    assert labels.isdisjoint(lexicon), sorted(labels & lexicon)
    assert labels.isdisjoint(dev), sorted(labels & dev)


def test_every_kind_has_labels_values_and_questions_in_both_languages() -> None:
    assert set(testsplit.PARAPHRASES) == set(testsplit.KINDS)
    for kind in testsplit.KINDS.values():
        for lang in testsplit.LANGS:
            assert kind.labels[lang] and len(kind.values[lang]) >= 5, (kind.name, lang)
            assert len(testsplit.PARAPHRASES[kind.name][lang]) >= 2, (kind.name, lang)
