"""Text for the cards that are not slots: events, knowledge notes, commitments, per language.

Event templates take ``{who}`` (a name, or I / 我 for the tenant's own user) and are written the way
an assistant logs what it was told; ``{place}``, ``{item}``, ``{client}``, ``{activity}`` and
``{other}`` are drawn from the pools below.
"""

from __future__ import annotations

EVENTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "en": (
        ("{who} flew to {place} for a conference", ("trip",)),
        ("{who} took the train to {place} to visit family", ("visit", "trip")),
        ("{who} met the {client} team about the quarterly budget", ("meeting",)),
        ("{who} had a one-on-one with {other}", ("meeting",)),
        ("{who} bought a new {item}", ("purchase",)),
        ("{who} went to a {activity} class with {other}", ("class",)),
        ("{who} visited {other} at the hospital", ("visit",)),
        ("{who} spent the day hiking near {place}", ("outdoors",)),
    ),
    "zh-Hant": (
        ("{who}飛去{place}參加研討會", ("出差",)),
        ("{who}搭高鐵到{place}看家人", ("拜訪", "旅行")),
        ("{who}和{client}團隊開會討論季度預算", ("會議",)),
        ("{who}跟{other}一對一面談", ("會議",)),
        ("{who}買了新的{item}", ("購物",)),
        ("{who}和{other}去上{activity}課", ("課程",)),
        ("{who}去醫院探望{other}", ("拜訪",)),
        ("{who}在{place}附近爬了一整天的山", ("戶外",)),
    ),
    "zh-Hans": (
        ("{who}飞去{place}参加研讨会", ("出差",)),
        ("{who}坐高铁去{place}看家人", ("拜访", "旅行")),
        ("{who}和{client}团队开会讨论季度预算", ("会议",)),
        ("{who}跟{other}一对一面谈", ("会议",)),
        ("{who}买了新的{item}", ("购物",)),
        ("{who}和{other}去上{activity}课", ("课程",)),
        ("{who}去医院探望{other}", ("拜访",)),
        ("{who}在{place}附近爬了一整天的山", ("户外",)),
    ),
}
PROJECT_EVENTS = {
    "en": ("Design review for {who}", "{who} sprint planning", "{who} demo for the client",
           "Incident post-mortem on {who}"),
    "zh-Hant": ("{who}設計審查會議", "{who}衝刺規劃會議", "{who}客戶展示", "{who}事故檢討會"),
    "zh-Hans": ("{who}设计评审会", "{who}迭代规划会", "{who}客户演示", "{who}故障复盘会"),
}
FILLERS: dict[str, dict[str, tuple[str, ...]]] = {
    "en": {"item": ("laptop", "bike", "rice cooker", "phone", "pair of running shoes", "espresso machine"),
           "client": ("Globex", "Initech", "Hooli", "Contoso"),
           "activity": ("pottery", "yoga", "cooking", "salsa"),
           "other": ("grandma", "an old friend", "the neighbours", "the team lead", "a cousin")},
    "zh-Hant": {"item": ("筆電", "腳踏車", "電鍋", "手機", "跑鞋", "咖啡機"),
                "client": ("台積電", "聯發科", "誠品"),
                "activity": ("陶藝", "瑜珈", "烹飪", "國標舞"),
                "other": ("外婆", "老朋友", "鄰居", "組長", "表妹")},
    "zh-Hans": {"item": ("笔记本电脑", "自行车", "电饭煲", "手机", "跑鞋", "咖啡机"),
                "client": ("腾讯", "华为", "美团"),
                "activity": ("陶艺", "瑜伽", "烹饪", "拉丁舞"),
                "other": ("外婆", "老朋友", "邻居", "组长", "表妹")},
}
FIRST_PERSON = {"en": "I", "zh-Hant": "我", "zh-Hans": "我"}

#: Topic → tags; a tenant notes the same topics again and again over the year.
TOPICS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "en": (("Sourdough starter", ("baking",)), ("Tax filing checklist", ("taxes", "finance")),
           ("Kubernetes upgrade notes", ("kubernetes", "devops")), ("Team onboarding", ("onboarding",)),
           ("Trip planning for Japan", ("travel", "japan")), ("Home network setup", ("network",))),
    "zh-Hant": (("報稅清單", ("報稅", "理財")), ("烤麵包筆記", ("烘焙",)), ("家庭旅遊規劃", ("旅遊",)),
                ("長輩用藥提醒", ("健康", "用藥")), ("裝修進度", ("裝修",)), ("孩子的補習班", ("教育",))),
    "zh-Hans": (("报税清单", ("报税", "理财")), ("面包烘焙笔记", ("烘焙",)), ("团建方案", ("团建",)),
                ("产品路线图", ("产品",)), ("招聘流程", ("招聘",)), ("数据库迁移", ("数据库", "迁移"))),
}
TIPS = {
    "en": ("start two weeks early", "keep the receipts in one folder", "double-check the dates",
           "ask for a second opinion", "write it down the same day", "set a reminder a week before"),
    "zh-Hant": ("提早兩週準備", "收據集中放一個資料夾", "再三確認日期", "多問一個人的意見", "當天就記下來",
                "前一週設提醒"),
    "zh-Hans": ("提前两周准备", "票据放在一个文件夹", "反复确认日期", "多问一个人的意见", "当天就记下来",
                "提前一周设提醒"),
}
COMMITMENTS = {
    "en": ("Send {whom} the photos from {place}", "Book a table for {whom}'s birthday",
           "Review {whom}'s slides", "Call {whom} about the move"),
    "zh-Hant": ("把{place}的照片傳給{whom}", "幫{whom}訂生日餐廳", "幫{whom}看簡報", "打給{whom}討論搬家"),
    "zh-Hans": ("把{place}的照片发给{whom}", "帮{whom}订生日餐厅", "帮{whom}看PPT", "给{whom}打电话商量搬家"),
}
