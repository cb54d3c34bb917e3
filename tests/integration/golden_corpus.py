"""The golden retrieval set: one user's four and a half months, written in Traditional Chinese,
Simplified Chinese and English, and the questions it must answer.

``CORPUS`` is replayed in order through the real commands (each step at its ``at`` on a simulated
clock in Asia/Taipei); every card gets a key, and ``QUERIES`` name the cards they expect by key.
The questions are asked at ``NOW``, a Thursday: 昨天 / yesterday is 2026-06-17, 前天 06-16,
三天前 06-15 (Monday), 上週 / last week 06-08 – 06-14, 上週三 06-10, 上個月 May, 四月 April.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from services.command.commands import Remember

TIME_ZONE = "Asia/Taipei"
TPE = ZoneInfo(TIME_ZONE)


def at(month: int, day: int, hour: int = 9, minute: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=TPE)


NOW = at(6, 18, 10)


@dataclass(frozen=True)
class Card:
    """Remember ``command`` at ``at``. ``links``: keys of the cards it links to on creation (an event
    ``affects`` a state's slot, knowledge is ``evidenced_by`` events)."""

    key: str
    at: datetime
    command: Remember
    links: tuple[str, ...] = ()
    outcome: str | None = None


@dataclass(frozen=True)
class MergeCard:
    """Merge the knowledge card ``key`` into ``into`` at ``at``."""

    key: str
    into: str
    at: datetime


Step = Card | MergeCard


def _scope(project: str | None) -> str:
    return "project" if project else "personal"


def fact(key: str, when: datetime, label: str, value: str, *, subject: str = "user",
         memory_type: str = "fact", valid_from: datetime | None = None, project: str | None = None,
         outcome: str = "remembered") -> Card:
    return Card(key, when, Remember(
        kind="state", memory_type=memory_type, subject=subject, label=label, content=value,
        valid_from=valid_from, scope=_scope(project), project_id=project), outcome=outcome)


def update(key: str, when: datetime, label: str, value: str, *, subject: str = "user",
           memory_type: str = "fact", valid_from: datetime | None = None,
           project: str | None = None) -> Card:
    """A new value of a single-value slot: it supersedes the one before."""
    return fact(key, when, label, value, subject=subject, memory_type=memory_type,
                valid_from=valid_from, project=project, outcome="superseded")


def event(key: str, occurred: datetime, description: str, *tags: str, project: str | None = None,
          links: tuple[str, ...] = ()) -> Card:
    return Card(key, occurred + timedelta(hours=2), Remember(
        kind="event", memory_type="event", content=description, occurred_at=occurred, tags=tags,
        scope=_scope(project), project_id=project), links=links, outcome="recorded")


def knowledge(key: str, when: datetime, title: str, body: str, *tags: str,
              project: str | None = None, links: tuple[str, ...] = ()) -> Card:
    return Card(key, when, Remember(
        kind="knowledge", memory_type="pattern", title=title, content=body, tags=tags,
        scope=_scope(project), project_id=project), links=links, outcome="learned")


def commitment(key: str, when: datetime, description: str, due: datetime) -> Card:
    return Card(key, when, Remember(kind="state", memory_type="commitment", content=description,
                                    owner="user", due_at=due), outcome="open")


def blocker(key: str, when: datetime, description: str, project: str | None = None) -> Card:
    return Card(key, when, Remember(kind="state", memory_type="blocker", content=description,
                                    scope=_scope(project), project_id=project), outcome="active")


CORPUS: tuple[Step, ...] = (
    # ---- February and early March: who the user is ---------------------------------------------------
    fact("addr_taipei", at(2, 2), "address", "台北市大安區和平東路二段 106 號 5 樓"),
    fact("employer_trend", at(2, 2), "employer", "趨勢科技 Trend Micro"),
    fact("title_backend", at(2, 2), "job_title", "後端工程師"),
    fact("phone_old", at(2, 2), "phone", "0912-345-678"),
    fact("email", at(2, 2), "email", "yating.hsu@example.com"),
    fact("birthday", at(2, 2), "birthday", "1993-08-21"),
    fact("skill_python", at(2, 2), "skills", "Python"),
    fact("skill_go", at(2, 2), "skills", "Go (Golang)"),
    fact("skill_pg", at(2, 2), "skills", "PostgreSQL 效能調校"),
    fact("lang_en", at(2, 2), "languages", "English (fluent, daily at work)"),
    fact("editor_vscode", at(2, 10), "editor", "VS Code"),
    fact("drink_pour", at(2, 10), "favorite_drink", "手沖咖啡，淺焙衣索比亞豆", memory_type="preference"),
    fact("diet", at(2, 10), "diet", "不吃牛肉", memory_type="preference"),
    fact("allergy", at(2, 10), "allergies", "花生過敏，吃到會起蕁麻疹"),
    fact("interest_hiking", at(2, 10), "interests", "登山，目標是爬完台灣百岳"),
    fact("interest_film", at(2, 10), "interests", "底片攝影 (film photography)"),
    fact("pet", at(2, 10), "pets", "一隻叫麻糬的柴犬"),
    event("ev_marathon", at(2, 15, 7), "Ran the Taipei half marathon in 1:58, a personal best",
          "running"),
    event("ev_flu", at(2, 24, 20), "感冒發燒到 38.5 度，請了兩天病假", "健康"),
    knowledge("kn_jwt_draft", at(3, 1, 21), "JWT 筆記",
              "JWT 由 header、payload、signature 三段組成，各段用 base64url 編碼，中間以點分隔。", "JWT"),
    fact("lang_ja", at(3, 2), "languages", "日文（JLPT N3）"),
    knowledge("kn_jwt", at(3, 5, 21), "JWT 無狀態驗證",
              "存取權杖用短效 JWT（15 分鐘）簽章，伺服器不保存 session；refresh token 放在 HttpOnly "
              "cookie，每次輪替時作廢舊的。", "JWT", "後端", "資安"),
    event("ev_interview", at(3, 10, 14), "Appier 終面：和資料平台組主管聊即時特徵管線的架構", "面試"),
    # ---- mid-March: a new job ------------------------------------------------------------------------
    update("employer_appier", at(3, 16), "employer", "Appier 沛星互動科技"),
    fact("manager_lin", at(3, 16), "manager", "林文婷 (Lin Wen-ting)"),
    fact("team", at(3, 16), "team", "資料平台組 (Data Platform)"),
    event("ev_onboard", at(3, 16, 10), "Appier 第一天報到，領了 MacBook 和門禁卡", "Appier",
          links=("employer_appier",)),
    fact("skill_k8s", at(3, 20), "skills", "Kubernetes 部署與維運"),
    MergeCard("kn_jwt_draft", "kn_jwt", at(3, 20, 21)),
    knowledge("kn_index", at(3, 24, 21), "資料庫索引設計",
              "複合索引把等值條件的欄位放前面、範圍條件的欄位放後面；用 EXPLAIN ANALYZE 確認查詢真的走 "
              "index scan。", "資料庫", "PostgreSQL", "索引"),
    event("ev_book", at(3, 28, 22), "讀完《Designing Data-Intensive Applications》第 5 章 Replication",
          "DDIA", "讀書"),
    knowledge("kn_cap", at(3, 29, 21), "CAP 定理",
              "網路分區發生時只能在一致性與可用性之間取捨；PostgreSQL 同步複寫偏向 CP，Cassandra 偏向 AP。",
              "分散式系統", links=("ev_book",)),
    # ---- April: Kaohsiung, Kyoto, fibon --------------------------------------------------------------
    update("addr_kaohsiung", at(4, 1), "address", "高雄市苓雅區四維三路 6 號 12 樓"),
    event("ev_move", at(4, 1, 15), "搬家到高雄，租屋處在苓雅區，離捷運站走路五分鐘", "搬家",
          links=("addr_kaohsiung",)),
    event("ev_kyoto", at(4, 4, 18), "去京都賞櫻，住在祇園附近，在哲學之道拍了兩卷底片", "旅行", "日本"),
    knowledge("kn_oauth", at(4, 8, 21), "OAuth 2.0 PKCE for mobile apps",
              "Public clients such as mobile apps must use PKCE: send an S256 code_challenge with the "
              "authorization request and the code_verifier when exchanging the code for tokens.",
              "OAuth", "security"),
    fact("fibon_launch_0815", at(4, 13), "launch_date", "2026-08-15", subject="fibon",
         memory_type="decision", project="fibon"),
    event("ev_fibon_kickoff", at(4, 13, 14), "fibon 專案 kickoff 會議，確認 MVP 範圍：記憶卡片與語意搜尋",
          "fibon", "會議", project="fibon"),
    fact("fibon_db", at(4, 14), "database", "PostgreSQL 18 + pgvector，不另外架 Elasticsearch",
         subject="fibon", memory_type="decision", project="fibon"),
    fact("helios_launch", at(4, 15), "launch_date", "2026-10-01", subject="helios",
         memory_type="decision", project="helios"),
    fact("helios_db", at(4, 15), "database", "MongoDB Atlas", subject="helios", memory_type="decision",
         project="helios"),
    knowledge("kn_grpc", at(4, 16, 21), "fibon 服務間通訊",
              "內部服務之間用 gRPC + protobuf，對外 API 用 REST；錯誤碼 UNAVAILABLE 要重試，"
              "INVALID_ARGUMENT 不要重試。", "gRPC", "fibon", project="fibon"),
    update("drink_oat", at(4, 20), "favorite_drink", "燕麥拿鐵，少冰", memory_type="preference"),
    fact("interest_jazz", at(4, 20), "interests", "爵士樂，尤其是 Bill Evans"),
    event("ev_aws", at(4, 21, 16), "Passed the AWS Solutions Architect Associate exam with 842 points",
          "AWS", "certification"),
    knowledge("kn_docker", at(4, 22, 21), "Docker multi-stage builds",
              "Build in a full SDK image, then copy only the binary into a distroless runtime image; "
              "the final image drops from 900 MB to 20 MB.", "Docker"),
    knowledge("kn_react", at(4, 27, 21), "React useEffect pitfalls",
              "List every dependency of the effect; an object or function created during render changes "
              "identity each time and re-runs the effect forever.", "React", "frontend"),
    knowledge("kn_rrf", at(4, 28, 21), "Reciprocal Rank Fusion",
              "Fuse the ranked lists of several search routes by summing 1/(k + rank) with k = 60; it "
              "needs no score calibration between routes.", "search", "ranking", project="fibon"),
    # ---- May: promotion, new manager, a wedding ------------------------------------------------------
    update("title_senior", at(5, 4, 12), "job_title", "資深後端工程師 (Senior Backend Engineer)"),
    event("ev_promo", at(5, 4, 11), "升上資深後端工程師，和主管談完年度考核與加薪", "升遷",
          links=("title_senior",)),
    knowledge("kn_redis", at(5, 6, 21), "Redis 快取失效策略",
              "寫入時先更新資料庫再刪快取（cache-aside）；熱門 key 的 TTL 加上隨機抖動，"
              "避免同時失效造成快取雪崩。",
              "Redis", "快取"),
    event("ev_wedding", at(5, 9, 18), "參加大學室友在台中的婚禮，當了伴郎", "婚禮"),
    fact("skill_rust", at(5, 12), "skills", "Rust（入門，正在讀 The Book）"),
    knowledge("kn_rust", at(5, 12, 21), "Rust ownership and borrowing",
              "Each value has exactly one owner; at any time you may hold many shared & borrows or one "
              "mutable &mut borrow, never both.", "Rust"),
    blocker("fibon_blocker", at(5, 15), "fibon 開源授權 (Apache-2.0) 還在等法務審核", project="fibon"),
    update("phone_new", at(5, 20), "phone", "0988-123-456"),
    update("manager_chen", at(5, 20), "manager", "陳宇涵 (Chen Yu-han)", valid_from=at(5, 6)),
    event("ev_concert", at(5, 23, 19, 30), "去衛武營聽爵士音樂會，現場版的 Waltz for Debby 很好聽", "音樂"),
    update("editor_neovim", at(5, 25), "editor", "Neovim (LazyVim)"),
    knowledge("kn_terraform", at(5, 26, 21), "Terraform remote state locking",
              "Keep the state file in S3 with a DynamoDB lock table so that two terraform apply runs never "
              "write the state at once.", "Terraform", "IaC"),
    event("ev_tokyo", at(5, 27, 22), "訂好七月去東京的機票，桃園飛羽田", "旅行", "日本"),
    update("fibon_launch_0901", at(5, 28), "launch_date", "2026-09-01（延後兩週，等 pgvector 調校）",
           subject="fibon", memory_type="decision", project="fibon"),
    knowledge("kn_hnsw", at(5, 28, 21), "pgvector HNSW 參數",
              "m 預設 16、ef_construction 預設 64；查詢時調大 hnsw.ef_search 換取召回率，"
              "過濾條件多時候選數也要加大。",
              "pgvector", "HNSW", "向量搜尋", project="fibon"),
    knowledge("kn_tz", at(5, 29, 21), "時區處理原則",
              "資料庫一律存 UTC（timestamptz），顯示時才轉成使用者時區如 Asia/Taipei；"
              "「昨天」這類相對時間要用使用者的時區解析。", "時區", "timezone"),
    # ---- June ----------------------------------------------------------------------------------------
    knowledge("kn_mem_leak", at(6, 2, 21), "Go 内存泄漏排查",
              "用 pprof 抓 heap profile，对比两次快照找持续增长的对象；"
              "常见原因是 goroutine 泄漏和没有 Stop 的 time.Ticker。", "内存", "Go", "pprof"),
    knowledge("kn_es", at(6, 3, 21), "Elasticsearch 中文分词",
              "中文字段用 ik_max_word 建索引、ik_smart 查询；繁体内容先用 OpenCC 转成简体再分词。",
              "Elasticsearch", "分词", "搜索"),
    knowledge("kn_go_ctx", at(6, 4, 21), "Go context cancellation",
              "Pass ctx as the first argument; every goroutine that blocks must select on ctx.Done(), "
              "otherwise it leaks when the caller gives up.", "Go", "concurrency"),
    knowledge("kn_ci_cache", at(6, 5, 21), "GitHub Actions 快取",
              "用 actions/cache 以 lock 檔的雜湊當 key 快取相依套件，CI 從 12 分鐘降到 4 分鐘。",
              "CI", "GitHub Actions"),
    knowledge("kn_kafka", at(6, 5, 22), "Kafka 分區與訊息順序",
              "同一個 key 的訊息進同一個分區才保證順序；消費者數量超過分區數時，"
              "多出來的消費者會閒置。", "Kafka"),
    knowledge("kn_tls", at(6, 6, 20), "cert-manager 自動更新 TLS 憑證",
              "在 Kubernetes 上用 cert-manager 搭配 Let's Encrypt 的 ACME，"
              "憑證到期前 30 天自動續期，不用手動換。",
              "TLS", "Kubernetes", "憑證"),
    knowledge("kn_event_sourcing", at(6, 6, 21), "事件溯源與 CQRS",
              "事件是唯一的真相來源，讀模型由投影重建；投影以事件的 id 做冪等，重複投遞不改變結果。",
              "event sourcing", "CQRS", project="fibon"),
    event("ev_meetup", at(6, 10, 19), "參加 Kubernetes 台灣社群 meetup，分享 HPA 自動擴縮的踩雷經驗",
          "Kubernetes", "meetup"),
    knowledge("kn_hpa", at(6, 10, 23), "Kubernetes HPA 自動擴縮",
              "HPA 依 CPU 使用率擴縮 Pod；容器要先設 resources.requests，否則 HPA 拿不到指標。"
              "冷啟動慢的服務要調高 stabilizationWindowSeconds。", "Kubernetes", "HPA",
              links=("ev_meetup",)),
    event("ev_incident", at(6, 11, 14), "Production incident: the PostgreSQL connection pool was exhausted "
          "for 40 minutes; we raised max_connections and put PgBouncer in front", "incident",
          "PostgreSQL"),
    knowledge("kn_pool", at(6, 11, 22), "数据库连接池配置",
              "连接池大小约为 CPU 核数 × 2 + 磁盘数；PgBouncer 用 transaction 模式时不能用 prepared "
              "statement。", "数据库", "PgBouncer", links=("ev_incident",)),
    event("ev_fibon_demo", at(6, 12, 16), "fibon sprint demo: showed semantic search over memory cards "
          "to the product manager", "fibon", "demo", project="fibon"),
    event("ev_helios_retro", at(6, 12, 17), "helios sprint 回顧會議：資料遷移延誤兩天", "helios", "會議",
          project="helios"),
    event("ev_hike", at(6, 13, 11), "和家人爬七星山，登頂後在陽明山吃野菜", "登山"),
    event("ev_okr", at(6, 15, 15), "和 Mei 開會討論 Q3 OKR，決定把搜尋延遲降到 200ms 以下", "OKR", "會議"),
    event("ev_deploy", at(6, 16, 17), "Deployed the billing service v2 to production after testing the "
          "rollback plan", "deploy", "billing"),
    event("ev_dentist", at(6, 17, 15), "到牙醫診所洗牙，醫生說左下的智齒之後要拔", "牙醫", "健康"),
    commitment("commit_doc", at(6, 18, 8), "週五前把 fibon 設計文件寄給 Mei", due=at(6, 19, 18)),
)

#: predecessor → the card that superseded it (a new value of its slot, or the survivor of a merge).
SUCCESSORS: dict[str, str] = {
    "addr_taipei": "addr_kaohsiung",
    "employer_trend": "employer_appier",
    "title_backend": "title_senior",
    "phone_old": "phone_new",
    "manager_lin": "manager_chen",
    "editor_vscode": "editor_neovim",
    "drink_pour": "drink_oat",
    "fibon_launch_0815": "fibon_launch_0901",
    "kn_jwt_draft": "kn_jwt",
}


@dataclass(frozen=True)
class Golden:
    """A question and the card(s) that answer it: any of ``expected`` counts as a hit. ``wrong``:
    cards that must not come back (another version of the slot, another project's card)."""

    text: str
    expected: tuple[str, ...]
    kind: str
    project_id: str | None = None
    valid_at: datetime | None = None
    known_at: datetime | None = None
    wrong: tuple[str, ...] = ()

    @property
    def as_of(self) -> bool:
        return self.valid_at is not None or self.known_at is not None


def q(text: str, *expected: str, kind: str, project: str | None = None, valid_at: datetime | None = None,
      known_at: datetime | None = None, wrong: tuple[str, ...] = ()) -> Golden:
    return Golden(text, expected, kind, project, valid_at, known_at, wrong)


QUERIES: tuple[Golden, ...] = (
    # ---- paraphrase: the semantic route's job --------------------------------------------------------
    q("我現在住在哪裡？", "addr_kaohsiung", kind="semantic", wrong=("addr_taipei",)),
    q("我在哪家公司上班", "employer_appier", kind="semantic", wrong=("employer_trend",)),
    q("我的職稱是什麼", "title_senior", kind="semantic", wrong=("title_backend",)),
    q("我的主管是誰", "manager_chen", kind="semantic", wrong=("manager_lin",)),
    q("我平常用什麼編輯器寫程式", "editor_neovim", kind="semantic", wrong=("editor_vscode",)),
    q("我喜歡喝什麼咖啡", "drink_oat", kind="semantic", wrong=("drink_pour",)),
    q("我對什麼食物過敏", "allergy", kind="semantic"),
    q("我養的狗叫什麼名字", "pet", kind="semantic"),
    q("我會說哪些語言", "lang_ja", "lang_en", kind="semantic"),
    q("我的生日是哪天", "birthday", kind="semantic"),
    q("Where do I live now?", "addr_kaohsiung", kind="semantic", wrong=("addr_taipei",)),
    q("Who is my current employer?", "employer_appier", kind="semantic", wrong=("employer_trend",)),
    q("What's my phone number?", "phone_new", kind="semantic", wrong=("phone_old",)),
    q("What are my hobbies?", "interest_hiking", "interest_film", "interest_jazz", kind="semantic"),
    q("How do I stop goroutines from leaking?", "kn_go_ctx", "kn_mem_leak", kind="semantic"),
    q("How should a mobile app log in with OAuth securely?", "kn_oauth", kind="semantic"),
    q("How can I make my container images smaller?", "kn_docker", kind="semantic"),
    q("我的邮箱地址是什么", "email", kind="semantic"),
    q("缓存雪崩怎么避免", "kn_redis", kind="semantic"),
    # ---- exact terms and tags: the tags route, Traditional meets Simplified --------------------------
    q("JWT", "kn_jwt", kind="tags", wrong=("kn_jwt_draft",)),
    q("json web token refresh", "kn_jwt", kind="tags", wrong=("kn_jwt_draft",)),
    q("資料庫連線池", "kn_pool", kind="tags"),
    q("数据库索引", "kn_index", kind="tags"),
    q("記憶體洩漏", "kn_mem_leak", kind="tags"),
    q("k8s 憑證", "kn_tls", kind="tags"),
    q("Kafka 分區", "kn_kafka", kind="tags"),
    q("CAP 定理", "kn_cap", kind="tags"),
    q("Terraform state lock", "kn_terraform", kind="tags"),
    q("Redis 快取", "kn_redis", kind="tags"),
    # ---- typos and fragments: the fuzzy route --------------------------------------------------------
    q("Kubernets HPA", "kn_hpa", kind="fuzzy"),
    q("高雄市", "addr_kaohsiung", kind="fuzzy", wrong=("addr_taipei",)),
    q("苓雅", "addr_kaohsiung", "ev_move", kind="fuzzy"),
    q("Elasticsearh 分詞", "kn_es", kind="fuzzy"),
    q("useEfect dependencies", "kn_react", kind="fuzzy"),
    q("Desiging Data-Intensive Aplications", "ev_book", kind="fuzzy"),
    q("PgBouncr", "kn_pool", "ev_incident", kind="fuzzy"),
    q("衛武營", "ev_concert", kind="fuzzy"),
    # ---- time words: the temporal route (Chinese and English) ----------------------------------------
    q("昨天做了什麼", "ev_dentist", kind="temporal"),
    q("昨天看牙医", "ev_dentist", kind="temporal"),
    q("前天部署了什麼", "ev_deploy", kind="temporal"),
    q("三天前的會議", "ev_okr", kind="temporal"),
    q("上週三參加了什麼活動", "ev_meetup", kind="temporal"),
    q("上週末去哪裡爬山", "ev_hike", kind="temporal"),
    q("四月時去哪裡旅行", "ev_kyoto", kind="temporal"),
    q("上個月參加了誰的婚禮", "ev_wedding", kind="temporal"),
    q("上周生产环境的事故", "ev_incident", kind="temporal"),
    q("What did I do yesterday?", "ev_dentist", kind="temporal"),
    q("What did I deploy the day before yesterday?", "ev_deploy", kind="temporal"),
    q("Which exam did I pass in April?", "ev_aws", kind="temporal"),
    q("meeting three days ago", "ev_okr", kind="temporal"),
    q("What did I do last Wednesday?", "ev_meetup", kind="temporal"),
    q("Where did I hike last weekend?", "ev_hike", kind="temporal"),
    # ---- as of a past moment: the version valid (or known) then --------------------------------------
    q("我住在哪裡", "addr_taipei", kind="as_of", valid_at=at(3, 1), wrong=("addr_kaohsiung",)),
    q("Where did I work?", "employer_trend", kind="as_of", valid_at=at(3, 1), wrong=("employer_appier",)),
    q("我的職稱", "title_backend", kind="as_of", known_at=at(4, 15), wrong=("title_senior",)),
    q("phone number", "phone_old", kind="as_of", valid_at=at(5, 1), wrong=("phone_new",)),
    q("我的主管是誰", "manager_lin", kind="as_of", known_at=at(5, 10), wrong=("manager_chen",)),
    q("我的主管是誰", "manager_chen", kind="as_of", valid_at=at(5, 10), wrong=("manager_lin",)),
    q("favorite code editor", "editor_vscode", kind="as_of", valid_at=at(4, 1), wrong=("editor_neovim",)),
    q("我喜歡喝什麼咖啡", "drink_pour", kind="as_of", valid_at=at(3, 1), wrong=("drink_oat",)),
    q("fibon 上線日期", "fibon_launch_0815", kind="as_of", project="fibon", known_at=at(5, 1),
      wrong=("fibon_launch_0901", "helios_launch")),
    q("JWT", "kn_jwt_draft", "kn_jwt", kind="as_of", known_at=at(3, 10)),
    # ---- a project in scope: its cards, never another project's --------------------------------------
    q("上線日期是哪天", "fibon_launch_0901", kind="project", project="fibon",
      wrong=("fibon_launch_0815", "helios_launch")),
    q("專案用什麼資料庫", "fibon_db", kind="project", project="fibon", wrong=("helios_db",)),
    q("服務之間怎麼通訊", "kn_grpc", kind="project", project="fibon"),
    q("專案目前卡在什麼地方", "fibon_blocker", kind="project", project="fibon"),
    q("which database does the project use", "helios_db", kind="project", project="helios",
      wrong=("fibon_db",)),
    q("how do we fuse the rankings of the search routes", "kn_rrf", kind="project", project="fibon"),
    q("投影怎麼做到冪等", "kn_event_sourcing", kind="project", project="fibon"),
    q("HNSW ef_search 召回率", "kn_hnsw", kind="project", project="fibon"),
    q("last week's demo", "ev_fibon_demo", kind="project", project="fibon", wrong=("ev_helios_retro",)),
)
