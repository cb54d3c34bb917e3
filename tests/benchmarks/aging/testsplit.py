"""The test split, frozen: slot kinds, labels, values, people and question templates in English and
Traditional Chinese that the retrieval lexicon (``services/query/retrieval/lexicon.py``) was not written
from. Most of its kinds are ones no concept of the lexicon covers (a pharmacy, a ferry, a locker
code, 鋼琴老師, 常喝的茶); its people are the user and the people around them (a sister, a
landlord, a colleague, friends by name).

Nothing here may be read to change the lexicon, and the lexicon's tests never read it: its figures
say what the lexicon does for labels and wordings it has never seen. ``tests/unit/
test_testsplit.py`` checks that no label here is one of the lexicon's labels. Placeholders are those
of :mod:`phrasings` (``{who}``, ``{whose}``, ``{whom}``, ``{does}``, ``{is}``, ``{has}``).
"""

from __future__ import annotations

from tests.benchmarks.aging.personas import Profile, SlotKind

LANGS = ("en", "zh-Hant")


def _single(name: str, en: tuple[str, ...], hant: tuple[str, ...], en_values: tuple[str, ...],
            hant_values: tuple[str, ...], memory_type: str = "fact") -> SlotKind:
    return SlotKind(name, "single_value", memory_type, {"en": en, "zh-Hant": hant},
                    {"en": en_values, "zh-Hant": hant_values}, mean_gap=150.0)


def _multi(name: str, en: tuple[str, ...], hant: tuple[str, ...], en_values: tuple[str, ...],
           hant_values: tuple[str, ...], memory_type: str = "fact") -> SlotKind:
    return SlotKind(name, "multi_value", memory_type, {"en": en, "zh-Hant": hant},
                    {"en": en_values, "zh-Hant": hant_values})


SINGLE_KINDS: tuple[SlotKind, ...] = (
    _single("pharmacy", ("pharmacist", "pharmacy_contact"), ("藥局", "常去的藥局"),
            ("Lena at Corner Pharmacy", "Mr. Okoye at Boots", "the Rite Aid on 5th", "Dr. Patel at CVS",
             "Greenleaf Apothecary"),
            ("巷口的大樹藥局", "杏一藥局", "長安藥局", "丁丁藥局", "躍獅藥局")),
    _single("ferry", ("ferry_timetable", "ferry_departure"), ("渡輪班次", "搭船時間"),
            ("06:50 from Pier 3", "07:40 from Pier 1", "08:15 from the north terminal", "07:05 express",
             "09:30 slow boat"),
            ("早上六點五十", "早上七點四十", "八點十五那班", "七點零五快船", "九點半慢船")),
    _single("locker", ("locker_code", "gym_locker_combo"), ("置物櫃密碼", "櫃子密碼"),
            ("4-17-32", "9-2-26", "31-8-15", "12-40-7", "25-3-19"),
            ("4172", "0926", "3815", "1207", "2519")),
    _single("piano_teacher", ("piano_teacher", "music_tutor"), ("鋼琴老師", "琴房老師"),
            ("Ms. Alvarez", "Mr. Hoffmann", "Yuki Sato", "Mrs. Greene", "Daniel Kwan"),
            ("蘇老師", "何老師", "葉老師", "范老師", "江老師")),
    _single("tea", ("usual_tea", "tea_order"), ("常喝的茶", "茶款"),
            ("Earl Grey", "sencha", "rooibos", "jasmine pearls", "Darjeeling"),
            ("東方美人", "高山烏龍", "鐵觀音", "文山包種", "紅玉紅茶"), memory_type="preference"),
    _single("dentist", ("dentist", "dental_clinic"), ("牙醫", "看牙的診所"),
            ("Dr. Nguyen", "Bright Smile Dental", "Dr. Castillo", "Harbour Dental", "Dr. Feldman"),
            ("仁愛牙醫", "微笑牙醫診所", "王牙醫", "晴天牙醫", "李牙醫")),
    _single("parking", ("parking_spot", "parking_bay"), ("停車格", "車位號碼"),
            ("B2-118", "level 3, bay 41", "P1-07", "B1-63", "level 2, bay 9"),
            ("B2-118", "B3-041", "地下一樓07號", "B1-63", "地下二樓9號")),
    _single("wifi", ("wifi_password", "router_password"), ("無線網路密碼", "路由器密碼"),
            ("maple-river-42", "blue-otter-77", "quiet-lantern-9", "paper-moon-13", "salt-harbor-58"),
            ("maple1234", "bluebird77", "lantern09", "paper1313", "harbor58")),
    _single("commute", ("commute", "bus_line"), ("通勤方式", "搭的公車"),
            ("the 307 bus", "bike along the river", "the red line", "the 7:20 train", "carpool with Mo"),
            ("307公車", "騎腳踏車", "捷運紅線", "搭區間車", "跟同事共乘")),
    _single("hairdresser", ("hairdresser", "barber"), ("髮型師", "剪頭髮的店"),
            ("Sal at Clip Joint", "Mira at Studio Nine", "the barber on Elm St", "Jo at Fringe",
             "Kai at Headway"),
            ("小安", "阿偉理髮", "曼都的Amy", "巷口家庭理髮", "Vivi造型")),
    _single("rent_day", ("rent_due_day", "rent_day"), ("繳房租日", "房租日"),
            ("the 1st", "the 5th", "the 10th", "the 15th", "the 28th"),
            ("每月1號", "每月5號", "每月10號", "每月15號", "每月25號")),
    _single("shoe_size", ("shoe_size",), ("鞋子尺寸", "鞋碼"),
            ("EU 36", "EU 38", "US 9", "US 10.5", "EU 42"),
            ("23號", "24號", "25.5號", "26號", "27號")),
    _single("class_time", ("yoga_class", "class_slot"), ("瑜伽課時間", "上課時段"),
            ("Tuesday 19:00", "Wednesday 07:30", "Thursday 18:15", "Saturday 09:00", "Monday 20:00"),
            ("週二晚上七點", "週三早上七點半", "週四傍晚六點一刻", "週六早上九點", "週一晚上八點")),
    _single("emergency", ("emergency_contact", "ice_contact"), ("緊急聯絡人",),
            ("Aunt Ruth", "Marco (brother)", "Dr. Simmons", "Noor (neighbour)", "Grandpa Joe"),
            ("阿姨", "哥哥", "鄰居陳太太", "舅舅", "外婆")),
    _single("insurer", ("insurer", "health_cover"), ("保險公司", "投保的公司"),
            ("Aetna", "Blue Shield", "Allianz", "AXA", "Cigna"),
            ("國泰人壽", "富邦人壽", "南山人壽", "新光人壽", "台灣人壽")),
    _single("vet", ("vet", "animal_clinic"), ("獸醫", "動物醫院"),
            ("Dr. Lindqvist", "Paws & Claws Clinic", "Riverside Vet", "Dr. Abara", "Happy Tails"),
            ("大安動物醫院", "毛孩動物醫院", "陳獸醫", "忠孝動物醫院", "快樂動物醫院")),
    _single("plate", ("license_plate", "plate"), ("車牌",),
            ("7KQX219", "BLU-4410", "RTE-3021", "8MNB552", "GRN-7788"),
            ("ABC-1234", "BHX-5521", "RDE-0930", "AKN-7712", "BCM-2468")),
    _single("wake", ("wake_up_time", "alarm_time"), ("起床時間", "鬧鐘時間"),
            ("5:45", "6:30", "7:00", "7:15", "8:00"),
            ("五點四十五", "六點半", "七點", "七點十五", "八點")),
    _single("cafe", ("usual_cafe", "coffee_spot"), ("常去的咖啡店", "咖啡館"),
            ("Blue Door Coffee", "Stumptown on 8th", "Little Fox Cafe", "Corner Bean", "Daily Grind"),
            ("路易莎", "cama", "黑沃咖啡", "星巴克", "伯朗咖啡"), memory_type="preference"),
    _single("mileage", ("weekly_mileage", "running_goal"), ("每週跑量", "跑步目標"),
            ("15 km", "20 km", "30 km", "a half marathon", "40 km"),
            ("十五公里", "二十公里", "三十公里", "半馬", "四十公里")),
    _single("book", ("current_book", "nightstand_book"), ("在讀的書", "床頭書"),
            ("Middlemarch", "The Overstory", "Piranesi", "Educated", "Klara and the Sun"),
            ("百年孤寂", "天龍八部", "挪威的森林", "三體", "小王子")),
    _single("daycare", ("daycare", "kindergarten"), ("幼兒園", "安親班"),
            ("Little Acorns", "Sunflower Daycare", "Maple Kids", "Bright Start", "Tiny Steps"),
            ("小太陽幼兒園", "向日葵幼兒園", "長頸鹿安親班", "小星星幼兒園", "彩虹安親班")),
    _single("passport", ("passport_expiry", "passport_valid_until"), ("護照效期",),
            ("2027-03-14", "2029-11-02", "2031-05-12", "2028-08-30", "2033-01-19"),
            ("2027年3月14日", "2029年11月2日", "2031年5月12日", "2028年8月30日", "2033年1月19日")),
    _single("mechanic", ("mechanic", "garage"), ("修車廠", "常去的車行"),
            ("Joe's Auto", "QuickFix Garage", "Marlon at Speedy", "Northside Motors", "Ace Auto Care"),
            ("阿龍汽車", "順發修車廠", "大同車行", "永興保養廠", "小林車業")),
    _single("carrier", ("mobile_carrier", "sim_provider"), ("電信業者", "門號業者"),
            ("T-Mobile", "Verizon", "Vodafone", "Mint Mobile", "AT&T"),
            ("中華電信", "台灣大哥大", "遠傳", "亞太電信", "台灣之星")),
    _single("bank", ("bank", "bank_branch"), ("往來銀行", "薪轉銀行"),
            ("Chase", "a credit union in Oakland", "HSBC", "Monzo", "Wells Fargo"),
            ("玉山銀行", "台新銀行", "郵局", "國泰世華", "中國信託")),
)

MULTI_KINDS: tuple[SlotKind, ...] = (
    _multi("meds", ("medications", "daily_meds"), ("在吃的藥", "長期用藥"),
           ("metformin", "vitamin D", "fish oil", "an inhaler", "allergy pills", "blood pressure pills",
            "iron tablets"),
           ("降血壓藥", "鈣片", "維他命D", "魚油", "胃藥", "安眠藥", "鐵劑")),
    _multi("subscriptions", ("subscriptions", "streaming_services"), ("訂閱", "訂閱的服務"),
           ("Netflix", "Spotify", "Disney+", "YouTube Premium", "Apple TV+", "Audible", "HBO Max"),
           ("Netflix", "KKBOX", "Disney+", "YouTube Premium", "friDay影音", "LINE TV", "Spotify")),
    _multi("teams", ("teams_followed", "fan_of"), ("支持的球隊", "追的球隊"),
           ("the Lakers", "the Yankees", "Arsenal", "the Seahawks", "the Cubs", "Boca Juniors"),
           ("中信兄弟", "樂天桃猿", "統一獅", "富邦悍將", "味全龍", "台鋼雄鷹")),
    _multi("intolerances", ("food_intolerances", "cannot_eat"), ("不能碰的食材", "食材禁忌"),
           ("peanuts", "shellfish", "lactose", "gluten", "sesame", "raw onion"),
           ("花生", "蝦子", "牛奶", "麩質", "芝麻", "香菜")),
    _multi("plants", ("houseplants", "plants"), ("家裡的植物", "盆栽"),
           ("a monstera", "pothos", "a fiddle-leaf fig", "snake plant", "basil", "succulents"),
           ("龜背芋", "黃金葛", "琴葉榕", "虎尾蘭", "九層塔", "多肉")),
    _multi("podcasts", ("podcasts", "shows_listened_to"), ("常聽的節目", "收聽的Podcast"),
           ("Radiolab", "99% Invisible", "Hard Fork", "The Daily", "Song Exploder", "Reply All"),
           ("百靈果", "台灣通勤第一品牌", "股癌", "大人的Small Talk", "吳淡如", "敏迪選讀")),
)

KINDS = {kind.name: kind for kind in (*SINGLE_KINDS, *MULTI_KINDS)}

#: Questions that name the label, any kind (``{label}``: the tenant's label, ``_`` read as a space).
NAMED = {"en": ("do you have {whose} {label} handy?", "I keep forgetting {whose} {label}",
                "what's the latest on {whose} {label}?"),
         "zh-Hant": ("{who}的{label}你記得嗎？", "幫我找一下{who}的{label}", "{who}目前的{label}是？")}
NAMED_MULTI = {"en": ("tell me all of {whose} {label}", "{whose} {label}, all of them?",
                      "which {label} {does} {who} have these days?"),
               "zh-Hant": ("把{who}的{label}都列出來", "{who}的{label}包括哪些？", "{who}的{label}有什麼？")}

#: kind → per language, questions that may or may not name the label (the run decides by the
#: words each question holds).
PARAPHRASES: dict[str, dict[str, tuple[str, ...]]] = {
    "pharmacy": {"en": ("who fills {whose} prescriptions?", "where {does} {who} pick up medicine?"),
                 "zh-Hant": ("{who}的藥都去哪裡拿？", "{who}領慢箋找誰？")},
    "ferry": {"en": ("what time {does} {who} catch the boat in the morning?",
                     "which crossing {does} {who} take across the bay?"),
              "zh-Hant": ("{who}早上幾點搭船？", "{who}坐的那班船幾點開？")},
    "locker": {"en": ("what combination {does} {who} use at the gym?", "how do I open {whose} locker?"),
               "zh-Hant": ("{who}健身房那個鎖要轉幾號？", "要怎麼打開{who}在健身房的櫃子？")},
    "piano_teacher": {"en": ("who gives {whom} lessons on the keys?", "who teaches {whom} to play?"),
                      "zh-Hant": ("{who}跟誰學琴？", "誰在教{who}彈琴？")},
    "tea": {"en": ("which leaves should I brew for {whom}?", "what {does} {who} steep in the afternoon?"),
            "zh-Hant": ("幫{who}泡什麼好？", "{who}下午都泡哪一種？")},
    "dentist": {"en": ("who looks after {whose} teeth?", "where {does} {who} get a cleaning?"),
                "zh-Hant": ("{who}都去哪裡洗牙？", "{who}牙痛要找誰？")},
    "parking": {"en": ("where {does} {who} leave the car at night?", "which bay is {whose} in the garage?"),
                "zh-Hant": ("{who}的車停哪一格？", "{who}在地下室停哪？")},
    "wifi": {"en": ("how do I get online at {whose} place?", "what do I type to join {whose} network?"),
             "zh-Hant": ("去{who}家要怎麼連網？", "{who}家的網路要輸入什麼？")},
    "commute": {"en": ("how {does} {who} get to the office?", "what {does} {who} ride in the morning?"),
                "zh-Hant": ("{who}每天怎麼去公司？", "{who}上班坐什麼？")},
    "hairdresser": {"en": ("who cuts {whose} hair?", "where {does} {who} get a trim?"),
                    "zh-Hant": ("{who}都給誰剪頭髮？", "{who}去哪裡修頭髮？")},
    "rent_day": {"en": ("when {does} {who} have to pay for the flat each month?",
                        "what day of the month is {whose} rent due?"),
                 "zh-Hant": ("{who}每個月幾號要交租？", "{who}哪天要付房租？")},
    "shoe_size": {"en": ("what size sneakers fit {whom}?", "which size boots should I get for {whom}?"),
                  "zh-Hant": ("買鞋給{who}要買幾號？", "{who}穿幾號的鞋？")},
    "class_time": {"en": ("which evening {is} {who} at the studio?", "when {does} {who} go stretch?"),
                   "zh-Hant": ("{who}哪天去上課？", "{who}幾點去做瑜伽？")},
    "emergency": {"en": ("who should be called if something happens to {whom}?",
                         "who do we ring if {who} {is} hurt?"),
                  "zh-Hant": ("{who}出事的話要通知誰？", "{who}受傷要打給誰？")},
    "insurer": {"en": ("who covers {whom} when {who} {is} ill?", "which plan pays {whose} hospital bills?"),
                "zh-Hant": ("{who}的保單是哪一家的？", "{who}住院是誰理賠？")},
    "vet": {"en": ("where {does} {who} take the dog when it's ill?", "who treats {whose} cat?"),
            "zh-Hant": ("{who}家的狗生病都帶去哪？", "{who}的貓都給誰看？")},
    "plate": {"en": ("what registration is on {whose} car?", "which tag {does} {who} drive with?"),
              "zh-Hant": ("{who}的車是幾號？", "{who}那台車掛什麼牌？")},
    "wake": {"en": ("how early {does} {who} get up?", "when {does} {whose} alarm go off?"),
             "zh-Hant": ("{who}早上幾點起來？", "{who}每天幾點醒？")},
    "cafe": {"en": ("where {does} {who} grab a latte on the way in?",
                    "which coffee place {does} {who} like?"),
             "zh-Hant": ("{who}都在哪買咖啡？", "{who}喜歡去哪一家喝咖啡？")},
    "mileage": {"en": ("how far {does} {who} run each week?", "how much {is} {who} jogging these days?"),
                "zh-Hant": ("{who}一週跑多少？", "{who}現在跑多遠？")},
    "book": {"en": ("what's on {whose} nightstand these days?", "which novel {is} {who} in the middle of?"),
             "zh-Hant": ("{who}最近在看哪本小說？", "{who}睡前讀什麼？")},
    "daycare": {"en": ("where {does} {who} drop the little one off in the morning?",
                       "which nursery {does} {whose} toddler go to?"),
                "zh-Hant": ("{who}早上把小孩送去哪？", "{who}的孩子下課後去哪？")},
    "passport": {"en": ("when {does} {whose} travel document run out?", "until when can {who} fly abroad?"),
                 "zh-Hant": ("{who}的證件什麼時候過期？", "{who}出國的證件用到哪天？")},
    "mechanic": {"en": ("who fixes {whose} car?", "where {does} {who} get the oil changed?"),
                 "zh-Hant": ("{who}車子壞了都去哪修？", "{who}去哪保養車？")},
    "carrier": {"en": ("which network is {whose} SIM on?", "who {does} {who} pay for mobile data?"),
                "zh-Hant": ("{who}的門號是哪一家的？", "{who}用哪家的網路吃到飽？")},
    "bank": {"en": ("where {does} {who} keep {whose} savings?", "where {does} {whose} salary land?"),
             "zh-Hant": ("{who}的錢存在哪家？", "{who}的薪水匯到哪？")},
    "meds": {"en": ("what pills {does} {who} take?", "what {is} {who} prescribed?"),
             "zh-Hant": ("{who}每天吃哪些藥？", "{who}醫生開了什麼給他？")},
    "subscriptions": {"en": ("what {does} {who} pay for every month to watch or listen?",
                             "which services {is} {who} signed up to?"),
                      "zh-Hant": ("{who}每個月付錢看哪些平台？", "{who}開了哪些會員？")},
    "teams": {"en": ("who {does} {who} cheer for?", "which clubs {does} {who} support?"),
              "zh-Hant": ("{who}都幫誰加油？", "{who}是哪一隊的球迷？")},
    "intolerances": {"en": ("what should we keep off {whose} plate?", "what makes {whom} sick to eat?"),
                     "zh-Hant": ("煮飯給{who}要避開什麼？", "{who}碰了什麼會不舒服？")},
    "plants": {"en": ("what green things {does} {who} water at home?", "what grows on {whose} windowsill?"),
               "zh-Hant": ("{who}陽台種了什麼？", "{who}家裡養了哪些綠色的？")},
    "podcasts": {"en": ("what {does} {who} listen to on the way in?", "which shows are in {whose} feed?"),
                 "zh-Hant": ("{who}通勤時都聽什麼？", "{who}耳機裡常放什麼節目？")},
}

#: The people of a test tenant besides its user, per language: relations (the subject as an
#: ingest worker stores "my sister") and friends by name.
PEOPLE = {"en": (("sister", "f", True), ("landlord", "m", True), ("colleague", "f", True),
                 ("Marta", "f", False), ("Deshawn", "m", False), ("Ilse", "f", False)),
          "zh-Hant": (("姊姊", "f", True), ("房東", "m", True), ("同事", "f", True),
                      ("阿傑", "m", False), ("曉雯", "f", False), ("宗翰", "m", False))}
#: How an English question names a relation: "my sister".
RELATION_FORM = {"en": "my {name}", "zh-Hant": "{name}"}

PROFILES = (Profile("household", "zh-Hant", (("zh-Hant", 1.0),), has_user=True),
            Profile("friends", "en", (("en", 1.0),), has_user=True))
