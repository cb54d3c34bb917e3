"""Who lives in the synthetic tenants and what can be said about them: slot kinds with the labels
different callers give them, value pools, names, event and note material, per language.

Languages: ``en``, ``zh-Hant`` (Traditional Chinese), ``zh-Hans`` (Simplified Chinese).
"""

from __future__ import annotations

from dataclasses import dataclass

LANGS = ("en", "zh-Hant", "zh-Hans")
Pool = dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class SlotKind:
    """A kind of slot. ``labels``: per language, the labels callers use for it (a tenant picks
    one, some subjects another); ``values``: per language (empty: drawn by the generator);
    ``mean_gap``: mean days between two changes; ``owner``: person or project."""

    name: str
    cardinality: str
    memory_type: str
    labels: Pool
    values: Pool
    mean_gap: float = 150.0
    owner: str = "person"


def _kind(name: str, labels: Pool, values: Pool, **extra: object) -> SlotKind:
    cardinality = str(extra.pop("cardinality", "single_value"))
    memory_type = str(extra.pop("memory_type", "fact"))
    return SlotKind(name, cardinality, memory_type, labels, values, **extra)  # type: ignore[arg-type]


SINGLE_KINDS: tuple[SlotKind, ...] = (
    _kind("residence", {
        "en": ("home_city", "address", "city", "location", "residence"),
        "zh-Hant": ("現居城市", "居住地", "住址"), "zh-Hans": ("居住城市", "居住地", "住址")}, {
        "en": ("Taipei", "Tainan", "Kaohsiung", "Taichung", "Hsinchu", "Kyoto", "Osaka", "Tokyo", "Seoul",
               "Singapore", "Vancouver", "Berlin", "London", "Melbourne", "Lisbon"),
        "zh-Hant": ("台北", "台南", "高雄", "台中", "新竹", "花蓮", "宜蘭", "嘉義", "京都", "東京", "大阪",
                    "新加坡", "溫哥華", "墨爾本"),
        "zh-Hans": ("北京", "上海", "深圳", "杭州", "成都", "广州", "南京", "苏州", "武汉", "西安", "新加坡",
                    "东京")}, mean_gap=130.0),
    _kind("occupation", {
        "en": ("occupation", "profession", "job", "job_title"),
        "zh-Hant": ("職業", "工作"), "zh-Hans": ("职业", "工作")}, {
        "en": ("nurse", "software engineer", "primary school teacher", "accountant", "product manager",
               "chef", "architect", "graphic designer", "data analyst", "pharmacist", "physiotherapist",
               "journalist"),
        "zh-Hant": ("護理師", "軟體工程師", "國小老師", "會計師", "產品經理", "廚師", "建築師", "平面設計師",
                    "資料分析師", "藥師", "物理治療師", "記者"),
        "zh-Hans": ("护士", "软件工程师", "小学老师", "会计", "产品经理", "厨师", "建筑师", "平面设计师",
                    "数据分析师", "药剂师", "理疗师", "记者")}, mean_gap=220.0),
    _kind("employer", {
        "en": ("employer", "company", "current_company", "workplace"),
        "zh-Hant": ("公司", "任職公司", "雇主"), "zh-Hans": ("公司", "工作单位", "雇主")}, {
        "en": ("Acme Corp", "Globex", "Initech", "Northwind Traders", "Contoso", "Umbrella Health",
               "Wayne Logistics", "Stark Labs", "Hooli", "Vandelay Industries"),
        "zh-Hant": ("台積電", "聯發科", "中華電信", "長庚醫院", "誠品書店", "國泰金控", "鴻海", "華碩",
                    "台大醫院", "統一超商"),
        "zh-Hans": ("腾讯", "阿里巴巴", "字节跳动", "华为", "美团", "京东", "小米", "百度", "网易",
                    "比亚迪")}, mean_gap=200.0),
    _kind("relationship", {
        "en": ("relationship_status", "relationship", "partner"),
        "zh-Hant": ("感情狀況", "伴侶"), "zh-Hans": ("感情状况", "恋爱状态")}, {
        "en": ("single", "dating Chris", "in a relationship with Jordan", "engaged to Sam", "married to Alex",
               "seeing Taylor", "dating Morgan"),
        "zh-Hant": ("單身", "和志明交往中", "跟宇翔在一起", "與家豪訂婚", "和俊傑結婚了", "和柏宇在約會"),
        "zh-Hans": ("单身", "和王强在交往", "跟李明在一起", "与刘洋订婚", "和陈浩结婚了", "在和赵磊约会")},
        mean_gap=170.0),
    _kind("diet", {
        "en": ("diet", "eating_habits", "dietary_preference"),
        "zh-Hant": ("飲食", "飲食習慣"), "zh-Hans": ("饮食习惯", "饮食")}, {
        "en": ("vegan", "vegetarian", "pescatarian", "keto", "gluten-free", "low-carb", "no restrictions",
               "halal", "dairy-free"),
        "zh-Hant": ("全素", "蛋奶素", "海鮮素", "生酮飲食", "無麩質", "低醣飲食", "不挑食", "不吃牛肉"),
        "zh-Hans": ("纯素", "蛋奶素", "生酮饮食", "无麸质", "低碳水", "不挑食", "不吃辣", "清真")},
        memory_type="preference", mean_gap=160.0),
    _kind("manager", {
        "en": ("manager", "supervisor", "reports_to", "boss"),
        "zh-Hant": ("主管", "直屬主管"), "zh-Hans": ("上司", "直属领导")}, {
        "en": ("Dana Whitfield", "Omar Haddad", "Priya Nair", "Marcus Chen", "Helen Okafor", "Lukas Brandt",
               "Sofia Reyes", "Tom Becker"),
        "zh-Hant": ("陳建宏", "黃怡君", "吳宗翰", "許雅婷", "鄭文傑", "謝佩君", "林俊宏"),
        "zh-Hans": ("王建国", "刘芳", "张强", "赵丽华", "孙浩", "周敏", "钱伟")}, mean_gap=180.0),
    _kind("drink", {
        "en": ("favorite_drink", "drink", "go_to_drink"),
        "zh-Hant": ("最愛飲料", "愛喝的飲料"), "zh-Hans": ("最喜欢的饮料", "爱喝的饮料")}, {
        "en": ("oat latte", "green tea", "americano", "bubble tea", "matcha latte", "sparkling water", "chai",
               "flat white", "oolong tea", "lemonade"),
        "zh-Hant": ("珍珠奶茶", "美式咖啡", "烏龍茶", "拿鐵", "檸檬紅茶", "抹茶拿鐵", "冬瓜茶", "燕麥奶咖啡",
                    "多多綠"),
        "zh-Hans": ("奶茶", "美式咖啡", "乌龙茶", "拿铁", "柠檬水", "抹茶拿铁", "酸梅汤", "燕麦拿铁",
                    "豆浆")},
        memory_type="preference", mean_gap=120.0),
    _kind("food", {
        "en": ("favorite_food", "favourite_dish", "comfort_food"),
        "zh-Hant": ("最愛食物", "喜歡的料理"), "zh-Hans": ("最喜欢的食物", "爱吃的菜")}, {
        "en": ("ramen", "sushi", "tacos", "pho", "dumplings", "pizza", "beef noodle soup", "pad thai",
               "fried chicken", "bibimbap"),
        "zh-Hant": ("牛肉麵", "小籠包", "滷肉飯", "拉麵", "火鍋", "蚵仔煎", "鹹酥雞", "壽司", "臭豆腐",
                    "鍋貼"),
        "zh-Hans": ("火锅", "小笼包", "兰州拉面", "烤鸭", "麻辣烫", "饺子", "煎饼果子", "螺蛳粉", "烤串",
                    "肉夹馍")}, memory_type="preference", mean_gap=140.0),
    _kind("phone", {
        "en": ("phone", "phone_number", "mobile"),
        "zh-Hant": ("手機", "電話"), "zh-Hans": ("手机号", "电话")}, {}, mean_gap=260.0),
)

PROJECT_KINDS: tuple[SlotKind, ...] = (
    _kind("launch", {
        "en": ("launch_date", "release_date", "go_live"),
        "zh-Hant": ("上線日期", "發布日期"), "zh-Hans": ("上线日期", "发布日期")}, {},
        memory_type="decision", mean_gap=60.0, owner="project"),
    _kind("database", {
        "en": ("database", "db", "datastore"),
        "zh-Hant": ("資料庫", "資料庫選擇"), "zh-Hans": ("数据库", "数据库选型")}, {
        lang: ("PostgreSQL", "MySQL", "MongoDB", "SQLite", "DynamoDB", "CockroachDB", "Cassandra")
        for lang in LANGS}, memory_type="decision", mean_gap=150.0, owner="project"),
    _kind("status", {
        "en": ("status", "stage", "project_status"),
        "zh-Hant": ("狀態", "進度"), "zh-Hans": ("状态", "进度")}, {
        "en": ("planning", "in development", "in beta", "launched", "on hold"),
        "zh-Hant": ("規劃中", "開發中", "測試中", "已上線", "暫停"),
        "zh-Hans": ("规划中", "开发中", "测试中", "已上线", "暂停")},
        memory_type="decision", mean_gap=90.0, owner="project"),
)

MULTI_KINDS: tuple[SlotKind, ...] = (
    _kind("skills", {"en": ("skills", "skill_set"), "zh-Hant": ("技能", "專長"),
                     "zh-Hans": ("技能", "特长")}, {
        "en": ("Python", "SQL", "public speaking", "Excel", "Figma", "negotiation", "Kubernetes",
               "photo editing", "first aid", "copywriting", "budgeting", "video editing"),
        "zh-Hant": ("簡報", "攝影", "烘焙", "Python", "剪輯影片", "寫程式", "急救", "理財規劃", "談判",
                    "插畫"),
        "zh-Hans": ("演讲", "摄影", "烘焙", "Python", "视频剪辑", "编程", "急救", "理财", "谈判", "插画")},
        cardinality="multi_value"),
    _kind("languages", {"en": ("languages", "spoken_languages"), "zh-Hant": ("會說的語言", "語言"),
                        "zh-Hans": ("语言能力", "会说的语言")}, {
        "en": ("English", "Mandarin", "Taiwanese", "Japanese", "Korean", "French", "Spanish", "German",
               "Cantonese", "Vietnamese"),
        "zh-Hant": ("英文", "國語", "台語", "日文", "韓文", "法文", "西班牙文", "德文", "粵語", "客家話"),
        "zh-Hans": ("英语", "普通话", "粤语", "日语", "韩语", "法语", "西班牙语", "德语", "上海话", "俄语")},
        cardinality="multi_value"),
    _kind("instruments", {"en": ("instruments", "musical_instruments"), "zh-Hant": ("樂器", "會的樂器"),
                          "zh-Hans": ("乐器", "会的乐器")}, {
        "en": ("piano", "guitar", "violin", "ukulele", "drums", "cello", "flute", "saxophone", "harmonica"),
        "zh-Hant": ("鋼琴", "吉他", "小提琴", "烏克麗麗", "爵士鼓", "大提琴", "長笛", "薩克斯風", "二胡"),
        "zh-Hans": ("钢琴", "吉他", "小提琴", "尤克里里", "架子鼓", "大提琴", "长笛", "萨克斯", "古筝")},
        cardinality="multi_value"),
    _kind("hobbies", {"en": ("hobbies", "interests"), "zh-Hant": ("興趣", "嗜好"),
                      "zh-Hans": ("爱好", "兴趣")}, {
        "en": ("hiking", "photography", "bouldering", "baking", "board games", "running", "knitting",
               "birdwatching", "gardening", "chess"),
        "zh-Hant": ("爬山", "攝影", "攀岩", "烘焙", "桌遊", "慢跑", "編織", "賞鳥", "園藝", "下圍棋"),
        "zh-Hans": ("爬山", "摄影", "攀岩", "烘焙", "桌游", "跑步", "织毛衣", "观鸟", "养花", "下象棋")},
        cardinality="multi_value", memory_type="preference"),
    _kind("pets", {"en": ("pets",), "zh-Hant": ("寵物",), "zh-Hans": ("宠物",)}, {
        "en": ("a cat named Mochi", "a dog named Lucky", "a rabbit named Bun", "two goldfish",
               "a parrot named Kiwi", "a hamster named Peanut"),
        "zh-Hant": ("一隻叫麻糬的貓", "一隻叫小黑的狗", "一隻叫湯圓的兔子", "兩條金魚", "一隻叫奇異果的鸚鵡",
                    "一隻叫花生的倉鼠"),
        "zh-Hans": ("一只叫团子的猫", "一只叫旺财的狗", "一只叫雪球的兔子", "两条金鱼", "一只叫豆豆的鹦鹉",
                    "一只叫花生的仓鼠")}, cardinality="multi_value"),
    _kind("tools", {"en": ("tools", "tools_used", "software"), "zh-Hant": ("常用工具", "工具"),
                    "zh-Hans": ("常用工具", "软件")}, {
        "en": ("Figma", "VS Code", "Notion", "Jira", "Excel", "Blender", "Slack", "Lightroom", "Tableau"),
        "zh-Hant": ("Figma", "VS Code", "Notion", "Excel", "LINE", "Canva", "Lightroom", "Google 試算表"),
        "zh-Hans": ("飞书", "钉钉", "企业微信", "WPS", "Notion", "Figma", "VS Code", "Excel")},
        cardinality="multi_value"),
)

KINDS = {kind.name: kind for kind in (*SINGLE_KINDS, *PROJECT_KINDS, *MULTI_KINDS)}

#: Given names (en) and (surname, given name) material (zh), with their gender.
EN_NAMES = (("Anna", "f"), ("Ben", "m"), ("Chloe", "f"), ("David", "m"), ("Emma", "f"), ("Felix", "m"),
            ("Grace", "f"), ("Henry", "m"), ("Iris", "f"), ("Jack", "m"), ("Kate", "f"), ("Leo", "m"),
            ("Mia", "f"), ("Noah", "m"), ("Olivia", "f"), ("Peter", "m"), ("Quinn", "f"), ("Ruby", "f"),
            ("Sam", "m"), ("Tara", "f"), ("Uma", "f"), ("Victor", "m"), ("Wendy", "f"), ("Zoe", "f"))
EN_SURNAMES = ("Lee", "Park", "Novak", "Silva", "Brown", "Kim", "Ito", "Meyer")
ZH_SURNAMES = {"zh-Hant": "林陳王張李黃吳劉蔡鄭許楊謝洪郭曾", "zh-Hans": "王李张刘陈杨赵黄周吴徐孙马朱胡郭"}
ZH_GIVEN = {
    "zh-Hant": (("美玲", "f"), ("志豪", "m"), ("怡君", "f"), ("家豪", "m"), ("淑芬", "f"), ("俊傑", "m"),
                ("雅琪", "f"), ("建宏", "m"), ("佩珊", "f"), ("宇翔", "m"), ("惠雯", "f"), ("冠廷", "m"),
                ("欣怡", "f"), ("承恩", "m"), ("思妤", "f"), ("柏翰", "m")),
    "zh-Hans": (("磊", "m"), ("娜", "f"), ("伟", "m"), ("洋", "m"), ("静", "f"), ("帆", "m"), ("敏", "f"),
                ("丽", "f"), ("杰", "m"), ("昊", "m"), ("婷", "f"), ("浩", "m"), ("琳", "f"), ("峰", "m"),
                ("月", "f"), ("涛", "m")),
}
PRONOUNS = {"en": {"f": "she", "m": "he"}, "zh-Hant": {"f": "她", "m": "他"},
            "zh-Hans": {"f": "她", "m": "他"}}
PROJECT_NAMES = {"en": ("Atlas", "Orion", "Nimbus", "Fibon", "Kestrel", "Juniper", "Halcyon", "Tundra"),
                 "zh-Hant": ("北極星", "青鳥", "星火", "白鷺", "曙光", "鯨落"),
                 "zh-Hans": ("飞鱼", "天枢", "青鸾", "长庚", "启明", "灯塔")}


@dataclass(frozen=True)
class Profile:
    """A kind of tenant: its language mix and whether its own user is a subject ("user")."""

    name: str
    lang: str
    mix: tuple[tuple[str, float], ...]
    has_user: bool
    solo: bool = False


PROFILES = (
    Profile("family", "zh-Hant", (("zh-Hant", 1.0),), has_user=True),
    Profile("team", "en", (("en", 0.8), ("zh-Hant", 0.2)), has_user=True),
    Profile("studio", "zh-Hans", (("zh-Hans", 1.0),), has_user=False),
    Profile("care", "en", (("en", 1.0),), has_user=False, solo=True),
)
