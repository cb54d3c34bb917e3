"""What a question asks for, from its grammar: a current value, or what was said or done — in
English, Traditional and Simplified Chinese."""

import pytest

from services.query.retrieval.asks import CURRENT, NO_SIGN, RECORD, reading


class TestACurrentValue:
    @pytest.mark.parametrize("text", [
        "where does the user live now?", "what is my current employer?", "is she still at the bakery?",
        "which phone do I use these days?", "who is my dentist at the moment?", "what am I reading lately?",
        "does he play the cello anymore?", "what's the latest on the roof repair?",
        "我現在住在哪裡？", "我现在住在哪里？", "她目前在哪家公司？", "如今誰負責這個專案", "他還在學日文嗎",
        "她仍住在高雄嗎", "最近在忙什麼", "这几天在读哪本书", "他正在寫什麼"])
    def test_a_present_marker_asks_for_a_current_value(self, text: str) -> None:
        assert reading(text).kind == CURRENT

    @pytest.mark.parametrize("text", [
        "where does the user live?", "what is my phone number?", "who are her colleagues?",
        "am I allergic to nuts?", "which team does Omar coach?"])
    def test_the_present_tense_asks_for_a_current_value(self, text: str) -> None:
        assert reading(text).kind == CURRENT
        assert reading(text).sign in {"does", "is", "are", "am"}

    @pytest.mark.parametrize("text", ["employer?", "user's address", "她住在哪裡？", "我的手機號碼",
                                      "咱们公司的地址"])
    def test_no_sign_either_way_is_a_current_value_by_default(self, text: str) -> None:
        assert reading(text).kind == CURRENT
        assert reading(text).sign == NO_SIGN


class TestWhatWasSaidOrDone:
    @pytest.mark.parametrize("text", [
        "when did she plant the olive tree?", "what did Omar say about the new office?",
        "where was I on my birthday?", "were the twins at the wedding?", "who organised the picnic?",
        "which cousin moved to Perth?", "what happened at the concert?", "who told you about the job?",
        "what books has she finished?", "have I ever been to Norway?", "where had they met?",
        "Didn't he call the plumber?"])
    def test_the_past_tense_or_perfect_aspect_asks_about_the_record(self, text: str) -> None:
        assert reading(text).kind == RECORD

    @pytest.mark.parametrize("text", [
        "how long has she been learning the violin?", "how long have I lived here now?",
        "what was I doing two years ago?", "where did I work before the bank?",
        "what did we eat last weekend?", "where did I use to swim?", "since when do I take the bus?",
        "where did I go yesterday?", "who used to coach the team?",
        "what was the first time we argued about?"])
    def test_a_time_before_now_asks_about_the_record(self, text: str) -> None:
        assert reading(text).kind == RECORD

    @pytest.mark.parametrize("text", [
        "她什麼時候搬到台中？", "她什么时候搬到台中？", "他以前在哪裡工作？", "我之前用什麼手機",
        "我去年去了哪裡旅行", "三天前我吃了什麼", "兩年前他住在哪", "他學鋼琴多久了", "你去過京都嗎",
        "他说了什么关于新家的事", "當初是誰推薦這家餐廳", "我曾經養過什麼狗", "何時開始學游泳的"])
    def test_chinese_time_words_and_aspect_particles_ask_about_the_record(self, text: str) -> None:
        assert reading(text).kind == RECORD

    @pytest.mark.parametrize("text", ["為了健康我吃什麼", "我了解哪些程式語言", "不過她喜歡什麼花",
                                      "她對什麼過敏"])
    def test_fixed_compounds_of_the_particles_are_no_aspect(self, text: str) -> None:
        assert reading(text).kind == CURRENT


def test_the_reading_names_the_sign_that_decided() -> None:
    assert reading("When did Ana paint the fence?").explained() == {"asks": RECORD, "sign": "did"}
    assert reading("她現在住哪").explained() == {"asks": CURRENT, "sign": "现在"}


def test_a_time_before_now_outweighs_a_present_marker() -> None:
    assert reading("where did I live before I live here now?").sign == "before"
