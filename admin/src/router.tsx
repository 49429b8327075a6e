import {
  createContext,
  type MouseEvent,
  type ReactNode,
  useCallback,
  useContext,
  useEffect,
  useMemo,
  useState,
} from 'react';

/** The console lives under /admin; routes are the rest of the path ("/", "/software", "/addons/<id>"). */
export const BASE = '/admin';

function currentRoute(): string {
  const path = window.location.pathname;
  const rest = path.startsWith(BASE) ? path.slice(BASE.length) : path;
  return rest === '' ? '/' : rest.replace(/\/+$/, '') || '/';
}

interface Router {
  route: string;
  navigate(to: string): void;
}

const RouterContext = createContext<Router | null>(null);

export function RouterProvider({ children }: { children: ReactNode }) {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const onPop = () => setRoute(currentRoute());
    window.addEventListener('popstate', onPop);
    return () => window.removeEventListener('popstate', onPop);
  }, []);
  const navigate = useCallback((to: string) => {
    window.history.pushState(null, '', BASE + (to === '/' ? '/' : to));
    setRoute(to);
    window.scrollTo(0, 0);
  }, []);
  const value = useMemo(() => ({ route, navigate }), [route, navigate]);
  return <RouterContext.Provider value={value}>{children}</RouterContext.Provider>;
}

export function useRouter(): Router {
  const value = useContext(RouterContext);
  if (value === null) throw new Error('useRouter outside RouterProvider');
  return value;
}

/** Props for an anchor that navigates inside the console without a page load. */
export function useLink(to: string) {
  const { navigate } = useRouter();
  return {
    href: BASE + (to === '/' ? '/' : to),
    onClick: (event: MouseEvent) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      navigate(to);
    },
  };
}
